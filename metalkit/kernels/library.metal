// library.metal: the part of the library every kernel shares. Including args.h here puts
// every argument struct in the library even before a kernel uses it, so both compilers
// check all of them.
#include "args.h"
