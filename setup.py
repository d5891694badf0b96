"""Build: Cython kernels (kernels/*.pyx, plus templated BLAS tables) -> autotune.kernels."""
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


def extensions() -> list:
    generate_blas_tables()
    flags = ["-O3"]
    mods = [*BLAS_VARIANTS, "_matadd", "_front"]
    exts = [Extension(f"autotune.kernels.{m}", [f"kernels/{m}.pyx"], include_dirs=[np.get_include()],
                      extra_compile_args=flags, define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])
            for m in mods]
    return cythonize(exts, compiler_directives={"language_level": 3}, quiet=True)


setup(ext_modules=extensions())
