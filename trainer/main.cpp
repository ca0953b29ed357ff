#include "common/allocator.h"
#include "trainer/commands.h"

int main(int argc, char** argv) {
  segtrain::keep_freed_memory();
  return segtrain::trainer::run_cli(argc, argv);
}
