"""Models assembled from config and chosen by registered name (``MODELS``); the contract every
model follows is ``methods.models.base.RetrievalModel``; each implements a model kind declared in
``methods.model_kinds``. Importing the package imports every module in it, so a model registers
itself by being a file here (``@register_model``), or in a plug-in folder's ``methods/models/``
(``methods.plugins``)."""
import importlib
import pkgutil

from methods.models.base import (MODELS, SIMILARITIES, BuildContext, CrossAttentionModel, EmbeddingModel,
                                 RetrievalModel, build_model, constructor_keywords, model_class, register_model)
from methods.plugins import load_plugin_modules

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
load_plugin_modules(__name__, __path__)   # a user's own, from the plug-in folders (methods.plugins)

__all__ = ["MODELS", "SIMILARITIES", "BuildContext", "CrossAttentionModel", "EmbeddingModel", "RetrievalModel",
           "build_model", "constructor_keywords", "model_class", "register_model"]
