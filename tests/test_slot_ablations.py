"""The set-embedding paper's appendix B.3 ablations of its slot attention (sampled initial slots,
a GRU update, elements without the global feature), each a switch whose default is the paper's
model: the GRU update against the GRU equations written out, the sampled slots' distribution and
their mean in evaluation, the elements without the global feature, and the table's rows."""
import pytest
import torch

from methods.models.set_prediction import SlotAggregation, SlotSetPrediction
from methods.plan import Plan
from tests.conftest import config_with_every_table

D, K, N = 8, 3, 5


def module(**switches):
    torch.manual_seed(0)
    return SlotAggregation(K, D, D, iterations=1, heads=2, head_dim=4, ff_mult=2, **switches).double()


def gru_by_hand(cell: torch.nn.GRUCell, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Cho et al.'s GRU as torch documents it: r, z gates and the candidate from (W_ih x + b_ih) and (W_hh h + b_hh)."""
    wi, wh = cell.weight_ih.chunk(3), cell.weight_hh.chunk(3)
    bi, bh = cell.bias_ih.chunk(3), cell.bias_hh.chunk(3)
    r = torch.sigmoid(x @ wi[0].T + bi[0] + h @ wh[0].T + bh[0])
    z = torch.sigmoid(x @ wi[1].T + bi[1] + h @ wh[1].T + bh[1])
    n = torch.tanh(x @ wi[2].T + bi[2] + r * (h @ wh[2].T + bh[2]))
    return (1 - z) * n + z * h


def test_the_gru_update_is_the_original_slot_attentions():
    m = module(slot_update="gru").eval()
    inputs = torch.randn(2, N, D, dtype=torch.float64)
    lengths = torch.tensor([N, N - 2])
    got, attn = m(inputs, lengths)
    # one iteration by hand: attention over the inputs, GRU(to_out(attended), slots), then the FFN residual
    context = m.norm_inputs(inputs)
    keys = m.to_k(context).view(2, N, 2, 4).transpose(1, 2)
    values = m.to_v(context).view(2, N, 2, 4).transpose(1, 2)
    slots = m.slots.expand(2, -1, -1)
    valid = torch.arange(N)[None, :] < lengths[:, None]
    weights = m.attention(slots, keys, valid)
    update = m.to_out((weights @ values).transpose(1, 2).reshape(2, K, -1))
    updated = gru_by_hand(m.gru, update.reshape(-1, D), slots.reshape(-1, D)).view(2, K, D)
    updated = updated + m.ff(m.norm_ff(updated))
    torch.testing.assert_close(got, m.norm_out(updated), rtol=0, atol=1e-12)
    residual = module()   # the paper's: the same weights but for the GRU, slots + update
    assert not hasattr(residual, "gru") and not torch.allclose(residual.eval()(inputs, lengths)[0], got)


def test_sampled_initial_slots_are_drawn_around_a_learned_mean_and_are_the_mean_in_evaluation():
    m = module(initial_slots="sampled")
    assert not hasattr(m, "slots") and m.slots_mu.shape == m.slots_log_sigma.shape == (1, 1, D)
    with torch.no_grad():
        m.slots_mu.copy_(torch.linspace(-1, 1, D).view(1, 1, D))
        m.slots_log_sigma.fill_(torch.log(torch.tensor(0.5)))
    like = torch.zeros(1, dtype=torch.float64)
    torch.manual_seed(3)
    draws = m.train().initial(20000, like)                              # (B, K, D): one draw per input and slot
    assert draws.shape == (20000, K, D)
    torch.testing.assert_close(draws.mean(dim=(0, 1)), m.slots_mu.view(D).detach(), rtol=0, atol=0.01)
    torch.testing.assert_close(draws.std(dim=(0, 1)), torch.full((D,), 0.5, dtype=torch.float64), rtol=0, atol=0.01)
    assert not torch.equal(draws[0, 0], draws[0, 1])                    # each slot its own draw
    assert torch.equal(m.eval().initial(4, like), m.slots_mu.expand(4, K, D))
    inputs = torch.randn(2, N, D, dtype=torch.float64)
    first, _ = m(inputs, torch.tensor([N, N]))
    again, _ = m(inputs, torch.tensor([N, N]))
    assert torch.equal(first, again)   # evaluation does not depend on the random state


def test_without_the_global_residual_the_elements_are_the_slots():
    aggregation = module().eval()
    inputs, glob = torch.randn(2, N, D, dtype=torch.float64), torch.randn(2, D, dtype=torch.float64)
    lengths = torch.tensor([N, N])
    without = SlotSetPrediction(aggregation, D, global_residual=False).double()
    elements, slots, _ = without(inputs, glob, lengths)
    assert torch.equal(elements, slots) and not hasattr(without, "norm_global")
    paper = SlotSetPrediction(aggregation, D).double()
    elements, slots, _ = paper(inputs, glob, lengths)
    torch.testing.assert_close(elements, paper.norm_global(glob)[:, None] + slots, rtol=0, atol=0)


def test_bad_switches_are_refused():
    for switches, message in (({"initial_slots": "random"}, "initial_slots must be one of"),
                              ({"slot_update": "lstm"}, "slot_update must be one of")):
        with pytest.raises(ValueError, match=message):
            module(**switches)


def test_the_b3_rows_run_each_ablation_and_list_it_as_a_switch_off_the_source():
    plan = Plan(config_with_every_table())
    rows = {r.id: r for r in plan.table("set_embeddings_b3", "coco").rows}
    module_of = {row_id: plan.experiment("coco", r.members[0]).config["model"]["set_module"] for row_id, r in rows.items()}
    assert not {"initial_slots", "slot_update", "global_residual"} & set(module_of["ours"])   # the paper's: no new key
    assert rows["ours"].members == [r for r in plan.table("set_embeddings_t1", "coco").rows if r.id == "ours"][0].members
    assert module_of["sampled_initial_slots"]["initial_slots"] == "sampled"
    assert module_of["gru_update"]["slot_update"] == "gru"
    assert module_of["no_global_residual"]["global_residual"] is False
    assert {k: module_of["original_slot_attention"][k] for k in ("initial_slots", "slot_update", "global_residual")} == {
        "initial_slots": "sampled", "slot_update": "gru", "global_residual": False}
    switched = {s["key"] for ledger in rows["original_slot_attention"].ledger for s in ledger["switches"]}
    assert {"model.set_module.initial_slots", "model.set_module.slot_update", "model.set_module.global_residual"} <= switched
    assert plan.table("set_embeddings_b3", "synthetic").rows   # built by the all-tables config


def test_the_original_slot_attention_model_trains_its_new_parameters():
    """The all-undone variant as the DAG builds it on the built-in data: a training step's loss
    reaches the GRU and the slots' mean and spread on both sides."""
    from methods import api
    cfg = api.experiment_config("set_embeddings", "synthetic", variants=["original_slot_attention"])
    model = api.build_model(cfg, 20, {"dim": 6, "regions": 3}).train()
    torch.manual_seed(1)
    images = {"features": torch.randn(4, 3, 6), "lengths": torch.tensor([3, 3, 2, 3])}
    texts = {"tokens": torch.randint(1, 20, (4, 5)), "lengths": torch.tensor([5, 4, 3, 5])}
    out = model.training_outputs(model.encode_images(images), model.encode_texts(texts))
    out["scores"][0].diagonal().sum().backward()
    for side in (model.image_set, model.text_set):
        assert not side.global_residual
        for parameter in (side.aggregation.slots_mu, side.aggregation.slots_log_sigma, side.aggregation.gru.weight_ih):
            assert parameter.grad is not None and parameter.grad.abs().sum() > 0
