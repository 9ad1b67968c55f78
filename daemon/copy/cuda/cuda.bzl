"""nvcc through a genrule (Bazel 4.2.3 has no CUDA rules; the build machine has no GPU).

cuda_library(name, src, hdrs, deps) compiles one .cu file with nvcc into a static archive and wraps
it in a cc_library together with the static CUDA runtime. Headers in `hdrs` must be plain C++
(cuda_runtime_api.h types at most) so that gcc-compiled code can include them; `cuda_hdrs` are
headers only the .cu file sees.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

# sm_90 machine code plus compute_90 PTX (forward compatibility), position independent.
NVCC_FLAGS = " ".join([
    "-O3",
    "-std=c++17",
    "-arch=sm_90",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
    "-Xcompiler -fPIC",
    "-Xptxas -warn-spills",
])

def cuda_library(name, src, hdrs = [], cuda_hdrs = [], deps = [], visibility = None):
    archive = "lib" + name + "_cu.a"
    native.genrule(
        name = name + "_nvcc",
        srcs = [src] + hdrs + cuda_hdrs,
        outs = [archive],
        cmd = ("tmp=$$(mktemp -d) && " +
               "%s %s -I. -I$(GENDIR) -c $(location %s) -o $$tmp/kernels.o && " +
               "ar rcs $@ $$tmp/kernels.o && rm -rf $$tmp") % (NVCC, NVCC_FLAGS, src),
        message = "nvcc " + src,
    )
    native.cc_library(
        name = name,
        srcs = [archive],
        hdrs = hdrs,
        linkstatic = True,
        alwayslink = True,
        deps = deps + ["@cuda//:cudart_static"],
        visibility = visibility,
    )
