"""PVSE's training objective written from yalesong/pvse's equations (model.py PVSE, EncoderImage,
EncoderText, PIENet, MultiHeadSelfAttention; loss.py PVSELoss), item by item and pair by pair in
float64, on a model's own weights: no padding, masks, blocks or batched kernels.

- image: g = fc(mean of the 7x7 cells); attention a = softmax over the cells of w2 tanh(w1 x);
  residual r_k = sigmoid(fc_pie(sum_n a_nk x_n)); element k = l2(LayerNorm(g + r_k));
- caption (--legacy): g = the bi-GRU's output at the last word (forward state after it, backward
  state after it alone); PIE-Net over the caption's own word embeddings;
- score s(i, j) = max over the K x K element pairs of the cosine (MaxPool2d(K) over the cosines);
- loss = mean_i max_j [m + s_ij - s_ii]_+ + mean_j max_i [m + s_ij - s_jj]_+ (--max_violation,
  reduction 'mean', the diagonal masked) + div_weight (diversity(img) + diversity(txt)) +
  mmd_weight mmd_rbf(all image elements, all text elements; gamma 0.5 on the un-squared distance).
"""
import torch


def layer_norm(ln, x):
    mean = x.mean()
    var = ((x - mean) ** 2).mean()
    return (x - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def unit(x):
    return x / torch.sqrt((x * x).sum())


def pie(module, local, glob):
    """(elements, residuals) of one item: ``local`` (N, d_in) its valid inputs, ``glob`` (D,)."""
    k = module.w2.weight.shape[0]
    elements, residuals = [], []
    for head in range(k):
        logits = [torch.dot(module.w2.weight[head], torch.tanh(module.w1.weight @ x)) for x in local]
        weights = torch.softmax(torch.stack(logits), dim=0)
        pooled = sum(w * x for w, x in zip(weights, local))
        residual = torch.sigmoid(module.fc.weight @ pooled + module.fc.bias)
        residuals.append(residual)
        elements.append(unit(layer_norm(module.norm, glob + residual)))
    return elements, residuals


def image_item(model, cells):
    """cells (H*W, C) of one image."""
    glob = model.region.fc.weight @ cells.mean(dim=0) + model.region.fc.bias
    return pie(model.image_set, cells, glob)


def caption_item(model, tokens):
    """tokens (n,) of one caption, unpadded."""
    words = model.text.embed(tokens)
    out, _ = model.text.gru(words[None])       # (1, n, 2H): torch's GRU over this caption alone
    return pie(model.text_set, words, out[0, -1])


def score(x, y):
    return torch.stack([torch.dot(a, b) for a in x for b in y]).max()


def hardest_hinges(scores, margin):
    n = scores.shape[0]
    i2t = sum(torch.clamp(torch.stack([margin + scores[i, j] - scores[i, i] for j in range(n) if j != i]), min=0).max()
              for i in range(n)) / n
    t2i = sum(torch.clamp(torch.stack([margin + scores[i, j] - scores[j, j] for i in range(n) if i != j]), min=0).max()
              for j in range(n)) / n
    return i2t + t2i


def diversity(sets):
    """mean over items of ||G - diag(G)||_F / K^2, G the Gram matrix of the l2-normalised residuals."""
    total = 0.0
    for residuals in sets:
        r = [unit(v) for v in residuals]
        k = len(r)
        off = sum(torch.dot(r[a], r[b]) ** 2 for a in range(k) for b in range(k) if a != b)
        total = total + torch.sqrt(off) / k ** 2
    return total / len(sets)


def kernel_mean(xs, ys, gamma):
    """mean of exp(-gamma |x - y|) over all pairs; a zero distance (an element with itself, or the
    two equal elements of a one-word caption) gives exp(0) = 1 and the gradient 0 that torch.norm
    gives there."""
    total = 0.0
    for x in xs:
        for y in ys:
            squared = ((x - y) ** 2).sum()
            total = total + (1.0 if float(squared.detach()) == 0 else torch.exp(-gamma * torch.sqrt(squared)))
    return total / (len(xs) * len(ys))


def mmd(xs, ys, gamma=0.5):
    return kernel_mean(xs, xs, gamma) - 2 * kernel_mean(xs, ys, gamma) + kernel_mean(ys, ys, gamma)


def pvse_loss(model, grid, tokens, lengths, margin, div_weight, mmd_weight):
    """PVSELoss of a batch whose caption i belongs to image i; ``grid`` (B, H, W, C)."""
    images = [image_item(model, g.reshape(-1, g.shape[-1])) for g in grid]
    captions = [caption_item(model, t[:int(n)]) for t, n in zip(tokens, lengths)]
    scores = torch.stack([torch.stack([score(x, y) for y, _ in captions]) for x, _ in images])
    loss = hardest_hinges(scores, margin)
    loss = loss + div_weight * (diversity([r for _, r in images]) + diversity([r for _, r in captions]))
    all_img = [e for x, _ in images for e in x]
    all_txt = [e for y, _ in captions for e in y]
    return loss + mmd_weight * mmd(all_img, all_txt), scores


def plateau_rates(base, values, factor, patience, mode="min", threshold=1e-4, cooldown=0, min_lr=0.0):
    """The rate before each epoch, as torch.optim.lr_scheduler.ReduceLROnPlateau steps on ``values``."""
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=base)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode=mode, factor=factor, patience=patience,
                                                           threshold=threshold, cooldown=cooldown, min_lr=min_lr)
    rates = [optimizer.param_groups[0]["lr"]]
    for value in values:
        scheduler.step(value)
        rates.append(optimizer.param_groups[0]["lr"])
    return rates

