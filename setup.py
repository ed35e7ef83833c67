"""Build the optional C accelerator, ``kvstore._speedups``.

Everything else about the package is declared in pyproject.toml. The
extension is ``optional``: if no C compiler is available the install still
succeeds and kvstore runs its pure-Python code paths (slower, same results).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kvstore._speedups",
            ["kvstore/_speedups.c"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
