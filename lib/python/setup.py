"""Builds the exmy wheel: the Python sources plus, copied into the package,
libexmy.so ($EXMY_LIBRARY, else bazel-bin/libexmy.so of this repository),
libexmy_cuda.so where it was built ($EXMY_CUDA_LIBRARY, else
bazel-bin/cuda/libexmy_cuda.so) and the trainer's recipe files
(experiments/configs/*.cfg), so that the installed package needs neither the
source tree nor environment variables.  Metadata: pyproject.toml."""
import glob
import os
import shutil

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


class BuildWithLibraries(build_py):
    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "exmy")
        for env, rel, needed in (("EXMY_LIBRARY", "bazel-bin/libexmy.so", True),
                                 ("EXMY_CUDA_LIBRARY", "bazel-bin/cuda/libexmy_cuda.so", False)):
            src = os.environ.get(env) or os.path.join(ROOT, rel)
            if os.path.exists(src):
                shutil.copyfile(src, os.path.join(dest, os.path.basename(rel)))
                print(f"exmy: bundled {src}")
            elif needed:
                print(f"exmy: warning: {src} not found (build it with `bazel build -c opt "
                      f"//:libexmy.so`); the installed package will need {env}")
        configs = sorted(glob.glob(os.path.join(ROOT, "experiments", "configs", "*.cfg")))
        os.makedirs(os.path.join(dest, "configs"), exist_ok=True)
        for cfg in configs:
            shutil.copyfile(cfg, os.path.join(dest, "configs", os.path.basename(cfg)))
        print(f"exmy: bundled {len(configs)} recipe files")


class BinaryDistribution(Distribution):
    """The wheel carries shared libraries: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibraries}, distclass=BinaryDistribution)
