"""Model kinds as the plan knows them (``MODEL_KINDS``): each model's image input, set sizes and
run description, declared without torch so that the DAG build does not import it. A model is a
kind declared here (one file per model) and its implementation in ``methods.models`` registered
under the same name. Importing the package imports every module in it, so a kind registers itself
by being a file here, or in a plug-in folder's ``methods/model_kinds/`` (``methods.plugins``)."""
import importlib
import pkgutil

from methods.model_kinds.base import MODEL_KINDS, ModelKind, describe_run, image_input_of, model_kind
from methods.model_kinds.description import DescribeContext, finetunes
from methods.plugins import load_plugin_modules

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
load_plugin_modules(__name__, __path__)   # a user's own, from the plug-in folders (methods.plugins)

__all__ = ["MODEL_KINDS", "DescribeContext", "ModelKind", "describe_run", "finetunes", "image_input_of", "model_kind"]
