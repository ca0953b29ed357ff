#include "trainer/commands.h"

int main(int argc, char** argv) { return segtrain::trainer::run_cli(argc, argv); }
