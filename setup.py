"""Builds the optional C accelerator kafkacompat.wire._validate (the record walk of Produce
validation). Without a compiler the build goes on and kafkacompat.wire.validation falls back to
its pure-Python walk."""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # noqa: BLE001 - no compiler, no Python headers, ...
            self.warn(f"the C accelerator was not built ({error}); the pure-Python validator will be used")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as error:  # noqa: BLE001
            self.warn(f"the C accelerator {ext.name} was not built ({error}); the pure-Python validator will be used")


setup(
    ext_modules=[Extension("kafkacompat.wire._validate", ["kafkacompat/wire/_validate.c"],
                           extra_compile_args=["-O2", "-std=c99"], optional=True)],
    cmdclass={"build_ext": OptionalBuildExt},
)
