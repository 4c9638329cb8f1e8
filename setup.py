"""
Ships the rl-zoo3 startup hook files (sb3_impact.pth, sb3_impact.start) into site-packages, for regular and
editable installs (``pip install -e .``) alike.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

HOOK_FILES = ("sb3_impact.pth", "sb3_impact.start")
PROJECT_DIR = Path(__file__).parent


class BuildPyWithStartupHook(build_py):
    def run(self) -> None:
        super().run()
        for name in HOOK_FILES:
            self.copy_file(str(PROJECT_DIR / name), str(Path(self.build_lib) / name), preserve_mode=0)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), *(str(Path(self.build_lib) / name) for name in HOOK_FILES)]


class EditableWheelWithStartupHook(editable_wheel):
    """
    An editable wheel holds only setuptools' own path hook, not what build_py wrote: the hook files are added to
    its root (site-packages). They sort after setuptools' ``__editable__.*.pth``, so the hook module imports
    through the editable finder. On a setuptools without this private step the hook is left out and
    ``sb3_impact.zoo.register()`` remains (see the README).
    """

    def _run_build_commands(self, dist_name, unpacked_wheel, build_lib, tmp_dir):  # type: ignore[no-untyped-def]
        outputs = super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)
        for name in HOOK_FILES:
            shutil.copyfile(PROJECT_DIR / name, Path(unpacked_wheel) / name)
        return outputs


commands: dict[str, type] = {"build_py": BuildPyWithStartupHook}
if hasattr(editable_wheel, "_run_build_commands"):
    commands["editable_wheel"] = EditableWheelWithStartupHook
setup(cmdclass=commands)
