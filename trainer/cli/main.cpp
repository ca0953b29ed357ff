#include "common/allocator.h"
#include "trainer/cli/command.h"

int main(int argc, char** argv) {
  segtrain::keep_freed_memory();
  return segtrain::trainer::cli::run_cli(argc, argv);
}
