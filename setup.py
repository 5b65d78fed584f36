"""Extension modules of shardvol; all metadata lives in pyproject.toml."""
from glob import glob

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

# Portable optimisation only: wheels must run on any x86-64 / aarch64 host.
COMPILE_ARGS = ["-O3", "-Wall", "-Wno-unused-function"]
INCLUDE_DIRS = ["csrc", np.get_include()]
MACROS = [("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")]
# a changed header rebuilds every module (they share copybox.h, sv_common.h, ...)
HEADERS = sorted(glob("csrc/*.h"))


def ext(name: str, *c_sources: str, libraries: tuple[str, ...] = ()) -> Extension:
    return Extension(
        f"shardvol._ext.{name}",
        [f"shardvol/_ext/{name}.pyx", *(f"csrc/{c}" for c in c_sources)],
        include_dirs=INCLUDE_DIRS,
        define_macros=MACROS,
        extra_compile_args=COMPILE_ARGS,
        libraries=list(libraries),
        depends=HEADERS,
    )


EXTENSIONS = [
    ext("morton", "morton.c"),
    ext("minishard", "minishard.c"),
    ext("hugeblock", "hugeblock.c"),
    ext("hashing", "murmurhash3.c"),
    ext("cseg", "cseg.c"),
    ext("compresso", "compresso.c"),
    ext("crackle_check", "crackle_check.c"),
    ext("downsample", "downsample.c"),
    ext("rawfile", "rawfile.c"),
    ext("transpose", "transpose.c"),
    ext("files", "filewrite.c"),
    # the system libzstd and libdeflate
    ext("chunkbox", "chunkbox.c", "transpose.c", "jpeg.c", libraries=("zstd", "deflate", "jpeg")),
    ext("_jpeg", "jpeg.c", libraries=("jpeg",)),  # the system libjpeg(-turbo)
]

setup(
    ext_modules=cythonize(
        EXTENSIONS,
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "embedsignature": True,
        },
    )
)
