"""Build: Cython kernels (kernels/*.pyx, plus templated BLAS tables) -> autotune.kernels."""
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

import numpy as np
from Cython.Build import cythonize
from Cython.Tempita import Template
from setuptools import Extension, setup

HERE = Path(__file__).parent
BLAS_VARIANTS = {  # module -> integer width of the library's Fortran interface
    "_blas_lp64": {"int_c": "int", "int_np": "int32", "int_name": "32-bit (LP64)"},
    "_blas_ilp64": {"int_c": "long long", "int_np": "int64", "int_name": "64-bit (ILP64)"},
}


def generate_blas_tables() -> None:
    """Render kernels/_blas.pyx.in once per integer width (only when the output is stale)."""
    src = HERE / "kernels" / "_blas.pyx.in"
    template = Template(src.read_text())
    for module, values in BLAS_VARIANTS.items():
        out = HERE / "kernels" / f"{module}.pyx"
        text = template.substitute(module=module, **values)
        if not out.exists() or out.read_text() != text:
            out.write_text(text)


def openmp_flags() -> list[str]:
    """``["-fopenmp"]`` when the C compiler builds and links a tiny OpenMP program, else []."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "omp.c"
        src.write_text("#include <omp.h>\nint main(void){return omp_get_max_threads() < 1;}\n")
        try:
            ok = subprocess.run([cc, "-fopenmp", str(src), "-o", str(Path(tmp) / "omp")],
                                capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
    return ["-fopenmp"] if ok else []


def extensions() -> list:
    generate_blas_tables()
    flags = ["-O3"]
    mods = [*BLAS_VARIANTS, "_matadd", "_front"]
    exts = [Extension(f"autotune.kernels.{m}", [f"kernels/{m}.pyx"], include_dirs=[np.get_include()],
                      extra_compile_args=flags, define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])
            for m in mods]
    return cythonize(exts, compiler_directives={"language_level": 3}, quiet=True) + openmp_extensions(flags)


def openmp_extensions(flags: list[str]) -> list:
    """The OpenMP kernel version (kernels/_omp.pyx), optional: without OpenMP (or if it fails to
    build) the package still builds and the "omp" kernel version reads as unavailable."""
    omp = openmp_flags()
    if not omp:
        print("autotune: no OpenMP compiler support; skipping autotune.kernels._omp")
        return []
    ext = Extension("autotune.kernels._omp", ["kernels/_omp.pyx"], include_dirs=[np.get_include()],
                    extra_compile_args=flags + omp, extra_link_args=omp, optional=True,
                    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])
    try:
        return cythonize([ext], compiler_directives={"language_level": 3}, quiet=True)
    except Exception as exc:  # a Cython error here must not stop the rest of the package building
        print(f"autotune: skipping autotune.kernels._omp ({exc})")
        return []


setup(ext_modules=extensions())
