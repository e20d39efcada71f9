"""Loss terms (``methods.losses.terms``: the registry and the weighted sum) and the ranking
losses registered as terms (``methods.losses.ranking``), and the set-embedding regularisers
(``methods.losses.set_regularisers``). Importing the package registers them."""
from methods.losses import ranking, set_regularisers  # noqa: F401  (registration)
from methods.losses.ranking import LOSSES, build_loss, directional_losses, loss_kind_at, loss_kwargs
from methods.losses.terms import LOSS_TERMS, Loss, LossTerm, rebase_term, term_configs

__all__ = ["LOSSES", "LOSS_TERMS", "Loss", "LossTerm", "build_loss", "directional_losses", "loss_kind_at",
           "loss_kwargs", "rebase_term", "term_configs"]
