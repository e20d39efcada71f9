"""VSRN's caption-generation loss written from KunpengLi1994/VSRN's code, caption by caption in
float64, on a model's own weights (its GRU modules run one sequence at a time):

- labels (data.py PrecompDataset.__getitem__): [<start>] + words + [<end>], cut to max_len ids with
  <end> last when longer than max_len - 1; written into max_len + 1 zeros; the mask is 1 up to and
  including the first zero;
- S2VTAttModel: EncoderRNN (vid2hid, dropout, GRU) over the regions, then DecoderRNN in 'train'
  mode for all max_len - 1 steps: Attention(linear1 on [memory; state], tanh, linear2, softmax over
  regions), GRU on dropout([word embedding; context]), log_softmax(out);
- LanguageModelCriterion(log_probs, labels[:, 1:], masks[:, 1:]): the masked NLL summed over the
  batch, divided by the batch size.
"""
import torch


def source_labels(ids, max_len):
    """(labels, mask) of one caption's ids (<start> ... <end>), as data.py builds them."""
    caption = list(ids)
    if len(caption) > max_len - 1:
        caption = caption[:max_len]
        caption[-1] = ids[-1]
    labels = [0] * (max_len + 1)
    labels[:len(caption)] = caption
    first_zero = labels.index(0)
    mask = [1.0 if j <= first_zero else 0.0 for j in range(max_len + 1)]
    return labels, mask


def caption_loss(decoder, regions, token_rows, max_len):
    """regions (B, N, D), token_rows: each caption's ids -> the source's caption loss."""
    total = 0.0
    hidden = decoder.encoder.hidden_size
    for r, ids in zip(regions, token_rows):
        labels, mask = source_labels(ids, max_len)
        memory, state = decoder.encoder(decoder.region_to_hidden(r)[None])        # (1, N, H), (1, 1, H)
        memory = memory[0]
        for t in range(max_len - 1):
            paired = torch.cat([memory, state[0, 0].expand(len(memory), hidden)], dim=1)   # [memory; state]
            energy = torch.tanh(paired @ decoder.attention_hidden.weight.t() + decoder.attention_hidden.bias)
            weights = torch.softmax((energy @ decoder.attention_score.weight.t())[:, 0], dim=0)
            context = (weights[:, None] * memory).sum(dim=0)
            word = decoder.embed.weight[labels[t]]
            out, state = decoder.decoder(torch.cat([word, context])[None, None], state)
            log_probs = torch.log_softmax(out[0, 0] @ decoder.out.weight.t() + decoder.out.bias, dim=0)
            total = total - log_probs[labels[t + 1]] * mask[t + 1]
    return total / len(token_rows)
