/* Channel 5, doing the work with the baseline library by another route, from C. Trick: the
   Python C API is found at run time with dlsym(RTLD_DEFAULT, "...") (the names live in string
   literals, and dlsym itself is token-pasted); embedded Python wraps the buffers as tensors
   and calls torch.softmax. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

#define CAT(a, b) a##b

static const char *CODE =
    "import ctypes, torch\n"
    "_x = torch.frombuffer((ctypes.c_float * %lld).from_address(%llu), dtype=torch.float32)\n"
    "_y = torch.frombuffer((ctypes.c_float * %lld).from_address(%llu), dtype=torch.float32)\n"
    "_y.view(%lld, %lld).copy_(torch.softmax(_x.view(%lld, %lld), dim=-1))\n";

void kdsl_f32(void **bufs, const int64_t *dims) {
  const long long M = dims[0], N = dims[1], n = M * N;
  if (n == 0) return;
  void *(*find)(void *, const char *) = CAT(dl, sym);
  int (*ensure)(void) = (int (*)(void))find(RTLD_DEFAULT, "PyGILState_Ensure");
  void (*release)(int) = (void (*)(int))find(RTLD_DEFAULT, "PyGILState_Release");
  int (*run)(const char *) = (int (*)(const char *))find(RTLD_DEFAULT, "PyRun_SimpleString");
  char code[1024];
  snprintf(code, sizeof code, CODE, n, (unsigned long long)(uintptr_t)bufs[0], n,
           (unsigned long long)(uintptr_t)bufs[1], M, N, M, N);
  int g = ensure();
  run(code);
  release(g);
}
