// libFuzzer's driver, for a target whose `main` is Swift's (SwiftPM names every executable's
// entry point itself, so libFuzzer's own `main` cannot be used). The symbol comes from the
// runtime that `-sanitize=fuzzer` links (libclang_rt.fuzzer); see llvm's FuzzerInterface.h.
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
