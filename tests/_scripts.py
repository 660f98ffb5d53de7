"""Load a command of scripts/ as a module, for the tests of its ``main``."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module (scripts/ on the path while it loads: scripts import each other)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # as `import name` from another script finds it (and dataclasses need it)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPTS))


class _Parsed(Exception):
    pass


def parser_of(name: str):
    """The ``argparse`` parser that ``scripts/<name>.py``'s ``main`` builds, caught at its ``parse_args`` before
    any work."""
    import argparse

    module, seen = load_script(name), []

    def parse_args(self, *args, **kwargs):
        seen.append(self)
        raise _Parsed

    original = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = parse_args
    try:
        module.main([])
    except _Parsed:
        return seen[0]
    finally:
        argparse.ArgumentParser.parse_args = original
    raise AssertionError(f"scripts/{name}.py's main parsed no arguments")
