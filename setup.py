"""Ships the rl-zoo3 startup hook files (sb3_impact.pth, sb3_impact.start) into site-packages."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HOOK_FILES = ("sb3_impact.pth", "sb3_impact.start")


class BuildPyWithStartupHook(build_py):
    def run(self) -> None:
        super().run()
        for name in HOOK_FILES:
            self.copy_file(str(Path(__file__).parent / name), str(Path(self.build_lib) / name), preserve_mode=0)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), *(str(Path(self.build_lib) / name) for name in HOOK_FILES)]


setup(cmdclass={"build_py": BuildPyWithStartupHook})
