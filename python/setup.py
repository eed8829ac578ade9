"""setup.py - the package (metadata in pyproject.toml) and, where it can be
built, the native torch backend (ringmaster/torch/native, design at the top
of process_group.cpp) as ringmaster.torch._native.

It needs torch's C++ headers (Debian's libtorch-dev), pybind11 (pybind11-dev),
Python's headers and libringmaster's public headers (../include in a
checkout, or RINGMASTER_INCLUDE). Where one is missing, or the compiler
fails, the package installs without it and the pure-Python backend serves
(ringmaster.torch.active_backend() says which). The extension links torch,
not libringmaster: it calls the library the package loads.

    /usr/bin/python3 -m pip install --no-build-isolation ./python
"""
import os
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def _native():
    inc = os.environ.get("RINGMASTER_INCLUDE", os.path.join(HERE, "..", "include"))
    torch_inc = os.environ.get("TORCH_INCLUDE", "/usr/include")
    need = {
        "libringmaster's headers (RINGMASTER_INCLUDE)": os.path.join(inc, "ringmaster",
                                                                     "ringmaster.h"),
        "torch's C++ headers (libtorch-dev; TORCH_INCLUDE)": os.path.join(
            torch_inc, "torch", "csrc", "distributed", "c10d", "ProcessGroup.hpp"),
        "pybind11 (pybind11-dev)": os.path.join(torch_inc, "pybind11", "pybind11.h"),
        "Python's headers (python3-dev)": os.path.join(sysconfig.get_paths()["include"],
                                                       "Python.h"),
    }
    missing = [k for k, v in need.items() if not os.path.exists(v)]
    if missing:
        print("ringmaster: the native torch backend is not built (missing %s); the Python "
              "backend serves" % ", ".join(missing))
        return []
    src = os.path.join("ringmaster", "torch", "native")
    return [Extension(
        "ringmaster.torch._native",
        sources=[os.path.join(src, "process_group.cpp"), os.path.join(src, "module.cpp")],
        include_dirs=[inc, torch_inc, os.path.join(torch_inc, "torch", "csrc", "api", "include")],
        define_macros=[("TORCH_EXTENSION_NAME", "_native"), ("TORCH_API_INCLUDE_EXTENSION_H", None),
                       ("_GLIBCXX_USE_CXX11_ABI", "1")],
        extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden"],
        libraries=["torch", "torch_cpu", "c10", "torch_python"],
        language="c++")]


class _Optional(build_ext):
    """A failed native build leaves the pure-Python package, saying why."""

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # the compiler's own output is above
            print("ringmaster: the native torch backend failed to build (%s); the Python "
                  "backend serves" % e)


setup(ext_modules=_native(), cmdclass={"build_ext": _Optional})
