"""Build hook: a copy installed with pip remembers the source tree it was
built from, so it finds that tree's build/ without ATTNC_LIB_DIR. The
metadata is in pyproject.toml."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class build_py_with_origin(build_py):
    def run(self):
        super().run()
        root = Path(__file__).resolve().parent.parent
        out = Path(self.build_lib) / "attnc" / "_origin.py"
        out.write_text("# written by setup.py: the source tree this copy was built from\n"
                       "SOURCE_TREE = %r\n" % str(root))


setup(cmdclass={"build_py": build_py_with_origin})
