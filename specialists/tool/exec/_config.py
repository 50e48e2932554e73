"""The exec section of the configuration; it lives with the rest in ``csp_web``."""

from csp_web.config_exec import (
    ENGINE_ENV,
    MIB,
    ExecConfig,
    ProgramRule,
    compile_pattern,
    overlaps,
)

__all__ = ["ENGINE_ENV", "MIB", "ExecConfig", "ProgramRule", "compile_pattern", "overlaps"]
