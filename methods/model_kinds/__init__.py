"""Model kinds as the plan knows them (``MODEL_KINDS``): each model's image input, set sizes and
run description, declared without torch so that the DAG build does not import it. A model is a
kind declared here and its implementation in ``methods.models`` registered under the same name.
A kind is declared in its schema block (``x-model``: image input and description,
``methods.model_kinds.declared``) or, with more to say, as a ``ModelKind`` class in a file here or
in a plug-in folder's ``methods/model_kinds/`` (``methods.plugins``): importing the package imports
every module in it, so a class registers itself by being a file there."""
import importlib
import pkgutil

from methods.model_kinds.base import MODEL_KINDS, ModelKind, describe_run, image_input_of, model_kind
from methods.model_kinds.declared import register_declared_kinds
from methods.model_kinds.description import DescribeContext, finetunes
from methods.plugins import load_plugin_modules

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
load_plugin_modules(__name__, __path__)   # a user's own, from the plug-in folders (methods.plugins)
register_declared_kinds(MODEL_KINDS)      # the kinds their schema blocks declare (x-model)

__all__ = ["MODEL_KINDS", "DescribeContext", "ModelKind", "describe_run", "finetunes", "image_input_of", "model_kind"]
