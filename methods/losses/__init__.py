"""Loss terms (``methods.losses.terms``: the registry and the weighted sum) and the ranking
losses registered as terms (``methods.losses.ranking``), the set-embedding regularisers (``methods.losses.set_regularisers``)
and the label-wise terms (``methods.losses.label_wise``). Importing the package registers them."""
from methods.losses import label_wise, ranking, set_regularisers  # noqa: F401  (registration)
from methods.losses.ranking import LOSSES, build_loss, directional_losses, loss_kind_at, loss_kwargs
from methods.losses.terms import LOSS_TERMS, Loss, LossTerm, rebase_term, term_configs

__all__ = ["LOSSES", "LOSS_TERMS", "Loss", "LossTerm", "build_loss", "directional_losses", "loss_kind_at",
           "loss_kwargs", "rebase_term", "term_configs"]
