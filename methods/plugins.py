"""Models from a folder of one's own (a plug-in folder), loaded as files of the package would be.

A plug-in folder mirrors the repository: ``methods/model_kinds/<name>.py`` (the model's
declaration, torch-free: its settings, from which its schema block is generated),
``methods/models/<name>.py`` (the model) and, anywhere in it, method files and paper files. A paper
file in a plug-in folder names its method files relative to that folder, as the repository's
name theirs relative to the repository.

The harness config's ``plugins`` lists the folders. Every process of a run must load the same
ones, and a job process reads no harness config, so they travel in the environment variable
``PLUGINS_ENV``: the workflow sets it from the config before it imports the package, and every
job inherits it (SLURM jobs through sbatch). A Python session sets it before importing ``methods``.
The packages that own a registry load their plug-in modules when they are imported
(``load_plugin_modules``); the plan checks that they loaded the configured folders.
"""
from __future__ import annotations

import importlib.util
import os
import pkgutil
import sys
from pathlib import Path

from methods.errors import HarnessError

PLUGINS_ENV = "RETRIEVAL_HARNESS_PLUGINS"
REPO_ROOT = Path(__file__).resolve().parents[1]

# package -> the plug-in folders its import loaded (what the plan checks against the config)
_LOADED: dict[str, tuple[str, ...]] = {}


def resolve_folders(folders: list[str], where: str = "plugins") -> list[str]:
    """Absolute paths of configured plug-in folders (relative ones from the repository root);
    a missing folder is an error naming ``where``."""
    out = []
    for folder in folders:
        path = Path(folder) if Path(folder).is_absolute() else REPO_ROOT / folder
        if not path.is_dir():
            raise HarnessError(f"{where}: plug-in folder '{folder}' is not a directory")
        out.append(str(path.resolve()))
    return out


def environment_value(folders: object) -> str:
    """The value of ``PLUGINS_ENV`` that loads ``folders`` (the config's ``plugins``, read before
    the config is validated: a value that is not a list of folder names is left to the schema)."""
    if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
        return ""
    return os.pathsep.join(resolve_folders(folders))


def plugin_folders() -> list[Path]:
    """The plug-in folders this process loads (``PLUGINS_ENV``)."""
    value = os.environ.get(PLUGINS_ENV, "")
    return [Path(p) for p in resolve_folders([p for p in value.split(os.pathsep) if p], PLUGINS_ENV)]


def load_plugin_modules(package: str, package_path: list[str]) -> None:
    """Import each plug-in folder's ``<package as a path>/*.py`` as a module of ``package`` (so
    that it registers itself, as the package's own files do). A name the package already has is
    an error: the plug-in's file would hide it or be hidden."""
    own = {m.name for m in pkgutil.iter_modules(package_path)}
    folders = plugin_folders()
    for folder in folders:
        for path in sorted((folder / Path(*package.split("."))).glob("*.py")):
            name = f"{package}.{path.stem}"
            if path.stem in own or name in sys.modules:
                raise HarnessError(f"{path}: {package} already has a module '{path.stem}'; rename the plug-in's file")
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
    _LOADED[package] = tuple(str(f) for f in folders)


def schema_files(stem: str) -> list[Path]:
    """The plug-in folders' ``workflow/schemas/<stem>.schema.yaml`` files that exist."""
    return [p for p in (f / "workflow" / "schemas" / f"{stem}.schema.yaml" for f in plugin_folders()) if p.is_file()]


def check_loaded(folders: list[str], package: str) -> None:
    """The configured plug-in folders are the ones ``package`` loaded: else a model of the config
    would be unknown to this process, or one it does not name would be known."""
    configured = tuple(resolve_folders(folders))
    loaded = _LOADED.get(package, ())
    if configured != loaded:
        raise HarnessError(f"plugins: the config names {list(configured) or 'no folder'}, but {package} was imported "
                           f"with {PLUGINS_ENV}={os.pathsep.join(loaded) or '(unset)'}; set {PLUGINS_ENV} to the "
                           f"configured folders before importing methods")


def method_files() -> list[Path]:
    """Every method file: ``config/methods/*.yaml`` of the repository, then of each plug-in folder."""
    return [p for root in (REPO_ROOT, *plugin_folders()) for p in sorted((root / "config" / "methods").glob("*.yaml"))]


def file_root(path: Path) -> Path:
    """The folder a file's relative paths start from: the plug-in folder it lies in, else the repository."""
    resolved = path.resolve()
    for folder in plugin_folders():
        if resolved.is_relative_to(folder):
            return folder
    return REPO_ROOT
