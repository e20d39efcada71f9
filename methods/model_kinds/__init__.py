"""Model kinds as the plan knows them (``MODEL_KINDS``): each model's declaration, written once and
without torch so that the DAG build does not import it: its settings (from which its method-schema
block is generated, ``method_schema``), image input, set sizes and run description. A model is a
kind declared here, as a ``ModelKind`` class in a file of this package or of a plug-in folder's
``methods/model_kinds/`` (``methods.plugins``), and its implementation in ``methods.models``
registered under the same name. Importing the package imports every module in it, so a kind
registers itself by being a file here."""
import importlib
import pkgutil

from methods.model_kinds.base import MODEL_KINDS, ModelKind, describe_run, image_input_of, model_kind
from methods.model_kinds.description import DescribeContext, finetunes, reads_cached_features
from methods.plugins import load_plugin_modules

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
load_plugin_modules(__name__, __path__)   # a user's own, from the plug-in folders (methods.plugins)

__all__ = ["MODEL_KINDS", "DescribeContext", "ModelKind", "describe_run", "finetunes", "image_input_of", "model_kind",
           "reads_cached_features"]
