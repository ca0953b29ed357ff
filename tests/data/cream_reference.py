#!/usr/bin/env python3
"""Pure-Python (stdlib only) reference of CREAM's training-sample rule, with the random draws explicit.

Source mirrored: github.com/bigai-nlco/CREAM, commit 1d15c73 ("Update README.md"), file src/train.py,
function CREAM(examples, **kwargs) at lines 188-237 (cited below as train.py:LINE). The paper is
Wu, Zhao, Zheng, "Never Miss A Beat ..." / "An Efficient Recipe for Long Context Extension via
Middle-Focused Positional Encoding" (NeurIPS 2024, arXiv 2406.07138). Where paper and code differ,
this file follows the code.

Names (the reference code's names in brackets):
  L_t  [model_max_position_embeddings]  pre-trained window, CLI default 4096 (train.py:42-45)
  L_e  [scaled_max_position_embeddings] = int(L_t * rope_scaling_factor) (train.py:256);
       rope_scaling_factor CLI default 1.0 (train.py:51), 8 in scripts/run_CREAM.sh
  sigma [sigma]  std of the Gaussian over rand_factor, CLI default 3.0 (train.py:53)
  doc_len [len(ids)]  length of the pre-tokenized document; CREAM does NOT truncate it (train.py:213)

Random draws, in the order the reference consumes them:
  rand_num       Python random.randint(0, 1) -- ONCE PER datasets.map BATCH of 3000 documents
                 (train.py:197, outside the per-document loop; map(batched=True, batch_size=3000,
                 num_proc=1) at train.py:312-318), not per sample. 0 -> head=tail=L_t//3,
                 1 -> head=tail=4*factor.
  uniform_random numpy legacy global RNG np.random.rand(), in [0, 1) (train.py:214), per document.
  end_id_offset  Python random.randint(lo, hi) (train.py:219) == lo + random._randbelow(hi-lo+1)
                 (CPython: getrandbits(k) with rejection). Here: any integer in [0, hi - lo].
The whole dataset is mapped once and cached (load_from_cache_file=True): each document yields one
fixed sample for all of training; nothing is re-drawn per epoch.

The "truncated Gaussian" (train.py:209-217) is inverse-CDF sampling through a 1000-point table, with
CLAMPING at the ends (not renormalisation): x = linspace(2, 2*factor, 1000), cdf = Phi((x-mu)/sigma)
with mu = 1 + factor, rand_factor = int(np.interp(u, cdf, x)). np.interp returns x[0] = 2 for
u < cdf[0] and x[-1] = 2*factor for u >= cdf[-1], so the lower tail mass Phi((1-factor)/sigma) lands
on rand_factor 2 and the upper tail mass (same size) on rand_factor 2*factor; in between rand_factor =
floor of the piecewise-linear inverse CDF, so rand_factor is an integer in {2, ..., 2*factor}. Units:
rand_factor/2 multiplies L_t (the middle may end no later than rand_factor/2 * L_t - tail_len - 1),
so rand_factor is in half-L_t units; mean (1+factor)/2 * L_t positions, std sigma/2 * L_t positions.
"""
import bisect
import json
import math
import sys


def linspace(start, stop, num):
    """np.linspace(start, stop, num) for num > 1 (numpy's arithmetic: i*step + start, last = stop)."""
    delta = float(stop - start)
    div = num - 1
    step = delta / div
    if step == 0:  # numpy's special case (factor == 1): y = i / div * delta
        y = [(i / div) * delta + start for i in range(num)]
    else:
        y = [i * step + start for i in range(num)]
    y[-1] = float(stop)
    return y


def np_interp_scalar(u, xp, fp):
    """np.interp(u, xp, fp) for a scalar u, as numpy's arr_interp computes it (no slope table, since
    len(x) = 1 < len(xp)): clamp to fp[0] / fp[-1] outside [xp[0], xp[-1]], else
    slope*(u - xp[j]) + fp[j] with xp[j] <= u < xp[j+1]. (Plateaus in xp -- cdf values rounded to
    exactly 0.0 or 1.0 for large factor -- only matter for u exactly equal to such a value.)"""
    n = len(xp)
    if u < xp[0]:
        return fp[0]
    if u > xp[-1]:
        return fp[-1]
    j = bisect.bisect_right(xp, u) - 1
    if j >= n - 1:
        return fp[-1]
    if xp[j] == u:
        return fp[j]
    slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j])
    return slope * (u - xp[j]) + fp[j]


def cream_cdf_table(factor, sigma):
    """train.py:209-211: mu, sigma = 1 + factor, sigma; x = np.linspace(2, factor*2, 1000);
    cdf = 0.5 * (1 + sp.erf((x - mu) / (sigma * np.sqrt(2)))). scipy.special.erf is Cephes; math.erf
    (and C++ std::erf) may differ from it by an ulp, which can change rand_factor only if the
    interpolated value lands within ~1e-15 of an integer."""
    mu = 1 + factor
    x = linspace(2, factor * 2, 1000)
    cdf = [0.5 * (1 + math.erf((xi - mu) / (sigma * math.sqrt(2)))) for xi in x]
    return x, cdf


def cream_rand_factor(uniform_random, factor, sigma):
    """train.py:215-217: rand_factor = np.interp(uniform_random, cdf, x).astype(int) (truncation
    toward zero = floor, values are >= 2); assert rand_factor in 2..2*factor."""
    x, cdf = cream_cdf_table(factor, sigma)
    rand_factor = int(np_interp_scalar(uniform_random, cdf, x))
    assert 2 <= rand_factor <= factor * 2, rand_factor  # train.py:217
    return rand_factor


def cream_segment_lengths(L_t, L_e, rand_num):
    """train.py:196-205. Returns factor, head_len, tail_len, len_chunk."""
    factor = L_e // L_t                          # train.py:196 (integer division)
    if rand_num == 0:                            # train.py:198-200: 'relativity' (three ~equal thirds)
        head_len = L_t // 3
        tail_len = L_t // 3
    else:                                        # train.py:201-203: 'continuity' (short head/tail)
        head_len = 4 * factor
        tail_len = 4 * factor
    len_chunk = L_t - head_len - tail_len        # train.py:205 (middle gets the remainder)
    if len_chunk < 0:
        raise ValueError("len_chunk < 0: torch.arange in train.py:221 would fail")
    return factor, head_len, tail_len, len_chunk


def cream_end_id_range(L_t, head_len, tail_len, len_chunk, rand_factor):
    """train.py:219: random.randint(int(head_len + (len_chunk-1)*(rand_factor/2)),
    (rand_factor/2)*L_t - tail_len - 1). Both bounds inclusive. The upper bound is a float; Python
    3.9 randrange raises ValueError when it is not integral (rand_factor*L_t odd), 3.12+ raises
    TypeError for any float, so the reference code only runs as written on Python < 3.12."""
    lo = int(head_len + ((len_chunk - 1) * (rand_factor / 2)))
    hi_f = ((rand_factor / 2) * L_t) - tail_len - 1
    if hi_f != int(hi_f):
        raise ValueError("non-integer stop for randrange() (rand_factor * L_t is odd)")
    hi = int(hi_f)
    if hi < lo:  # cannot happen for rand_factor >= 2: hi - lo >= (rand_factor/2 - 1)*(head+tail+1)
        raise ValueError("empty range for randrange()")
    return lo, hi


def _arange(a, b):
    if a > b:
        raise ValueError("torch.arange: upper bound and lower bound inconsistent with step sign")
    return list(range(a, b))


def cream_sample(L_t, L_e, sigma, draws, doc_len=None):
    """One CREAM training sample (train.py:188-237) given explicit draws.

    draws: {"rand_num": 0|1, "uniform_random": float in [0,1), "end_id_offset": int in [0, hi-lo]}
           (or "end_id_u": float in [0,1) instead of end_id_offset: offset = floor(end_id_u*(hi-lo+1)))
    doc_len: len(ids) of the document (default L_e).
    Returns dict with token_offsets (indices into the document, in sample order), position_ids,
    loss_mask (1 = token is a label), and the intermediate values.
    """
    if doc_len is None:
        doc_len = L_e
    rand_num = draws["rand_num"]
    factor, head_len, tail_len, len_chunk = cream_segment_lengths(L_t, L_e, rand_num)

    # train.py:206-207: head positions 0..head_len-1; tail positions end at factor*L_t (not L_e).
    pos_ids_1 = _arange(0, head_len)
    pos_ids_3 = _arange(factor * L_t - tail_len, factor * L_t)

    rand_factor = cream_rand_factor(draws["uniform_random"], factor, sigma)  # train.py:214-217
    lo, hi = cream_end_id_range(L_t, head_len, tail_len, len_chunk, rand_factor)
    if "end_id_offset" in draws:
        off = draws["end_id_offset"]
    else:  # convenience for tests: a uniform in [0, 1) scaled to the range (NOT CPython's _randbelow)
        off = int(draws["end_id_u"] * (hi - lo + 1))
    if not 0 <= off <= hi - lo:
        raise ValueError(f"end_id_offset {off} outside [0, {hi - lo}]")
    end_id = lo + off                                                       # train.py:219

    # train.py:221-222: middle positions end_id-(len_chunk-1) .. end_id (inclusive), contiguous.
    pos_ids_2 = _arange(end_id - (len_chunk - 1), end_id + 1)
    position_ids = pos_ids_1 + pos_ids_2 + pos_ids_3

    # train.py:225-231: which document tokens. Head = ids[0:head_len] (pos_ids_1 reused as token
    # indices). Middle = the tokens AT the middle positions if end_id < len(ids); otherwise the
    # len_chunk tokens just before the tail tokens. Tail = the LAST tail_len tokens of the document,
    # whatever its length (equal to the tail positions only when len(ids) == factor*L_t).
    if end_id >= doc_len:                                                   # train.py:225-226
        input_pos_ids_2 = _arange(doc_len - tail_len - (len_chunk - 1) - 1, doc_len - tail_len)
    else:                                                                   # train.py:227-228
        input_pos_ids_2 = pos_ids_2
    input_pos_ids_3 = _arange(doc_len - tail_len, doc_len)                  # train.py:229
    token_offsets = pos_ids_1 + input_pos_ids_2 + input_pos_ids_3           # train.py:231
    # train.py:232 indexes torch.tensor(ids)[input_pos_ids]: negative indices wrap (only possible
    # when doc_len < L_t), indices >= doc_len raise IndexError.
    if any(t >= doc_len or t < -doc_len for t in token_offsets):
        raise IndexError("token index out of range (doc_len too short)")
    token_offsets = [t % doc_len for t in token_offsets]

    # train.py:235: labels = input_ids (no IGNORE_INDEX inside a sample), and the model shifts
    # (my_flash_modeling_llama.py:1074-1084): every token after the first is a target, including
    # the first middle token (predicted from the last head token) and the first tail token.
    loss_mask = [1] * len(token_offsets)
    return {
        "L_t": L_t, "L_e": L_e, "sigma": sigma, "doc_len": doc_len, "draws": draws,
        "factor": factor, "head_len": head_len, "tail_len": tail_len, "len_chunk": len_chunk,
        "rand_factor": rand_factor, "end_id_lo": lo, "end_id_hi": hi, "end_id": end_id,
        "token_offsets": token_offsets, "position_ids": position_ids, "loss_mask": loss_mask,
    }


def rand_factor_probabilities(factor, sigma):
    """P(rand_factor = k), k = 2..2*factor, implied by the table for u ~ U[0,1):
    rand_factor >= k  <=>  u >= F(k), with F = the table's piecewise-linear CDF (F(2*factor) = cdf[-1])."""
    x, cdf = cream_cdf_table(factor, sigma)
    ge = {k: (1.0 if k == 2 else 1.0 - np_interp_scalar(float(k), x, cdf)) for k in range(2, 2 * factor + 1)}
    ge[2 * factor + 1] = 0.0
    return {k: ge[k] - ge[k + 1] for k in range(2, 2 * factor + 1)}


def _compress(v):
    """Runs of consecutive integers as [start, stop) pairs, to keep the JSON short."""
    runs = []
    for t in v:
        if runs and t == runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([t, t + 1])
    return runs


def json_cases(path):
    """--json-cases FILE: each case of FILE's list ({L_t, L_e, sigma, rand_num, uniform_random,
    end_id_u}) as cream_sample computes it for a document of L_e tokens, printed as one JSON list
    (tests/data/cream_test.cpp compares the C++ sampler with it)."""
    with open(path) as f:
        cases = json.load(f)
    out = []
    for c in cases:
        draws = {"rand_num": c["rand_num"], "uniform_random": c["uniform_random"], "end_id_u": c["end_id_u"]}
        try:
            r = cream_sample(c["L_t"], c["L_e"], c["sigma"], draws)
        except (ValueError, AssertionError) as e:
            out.append({"error": str(e)})
            continue
        out.append({k: r[k] for k in ("rand_factor", "end_id_lo", "end_id_hi", "end_id", "head_len", "len_chunk",
                                      "token_offsets", "position_ids", "loss_mask")})
    print(json.dumps(out))


def middle_quarters(L_t, L_e, sigma, n, seed):
    """--middle-quarters L_t L_e SIGMA N SEED: the fraction of N samples (the reference's rule with
    Python's random draws) whose middle segment is centred in each quarter of [0, L_e), as JSON."""
    import random
    rng = random.Random(seed)
    quarters = [0, 0, 0, 0]
    for _ in range(n):
        draws = {"rand_num": rng.randint(0, 1), "uniform_random": rng.random(), "end_id_u": rng.random()}
        r = cream_sample(L_t, L_e, sigma, draws)
        centre = r["end_id"] - (r["len_chunk"] - 1) / 2
        quarters[min(3, int(centre * 4 // L_e))] += 1
    print(json.dumps([q / n for q in quarters]))


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--json-cases":
    json_cases(sys.argv[2])
elif __name__ == "__main__" and len(sys.argv) == 7 and sys.argv[1] == "--middle-quarters":
    middle_quarters(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
elif __name__ == "__main__":
    cases = [
        # (L_t, L_e, sigma, doc_len, rand_num, uniform_random, end_id_offset)
        (4096, 32768, 3.0, 32768, 0, 0.5, 0),       # relativity, median rand_factor (9)
        (4096, 32768, 3.0, 32768, 1, 0.5, 200),     # continuity: end_id range is only 228 wide
        (4096, 32768, 3.0, 32768, 1, 0.001, 0),     # lower clamp -> rand_factor 2: positions 0..L_t-1
        (4096, 32768, 3.0, 32768, 0, 0.999, 9000),  # upper clamp -> rand_factor 16
        (4096, 32768, 3.0, 10000, 0, 0.9, 3000),    # short document: end_id >= len(ids) branch
        (4096, 32768, 3.0, 8000, 0, 0.5, 10),       # end_id < len(ids) but middle tokens overlap tail
        (64, 256, 3.0, 256, 0, 0.7, 7),             # tiny sizes for unit tests
        (64, 256, 3.0, 256, 1, 0.2, 0),             # rand_factor 2: range has one value
        (64, 256, 3.0, 256, 1, 0.6, 3),
        (60, 180, 2.0, 200, 1, 0.35, 1),            # doc longer than factor*L_t, L_t % 3 == 0
        (63, 252, 3.0, 252, 0, 0.6, 0),             # odd rand_factor*L_t: reference raises ValueError
    ]
    out = []
    for L_t, L_e, sigma, doc_len, rn, u, off in cases:
        draws = {"rand_num": rn, "uniform_random": u, "end_id_offset": off}
        try:
            r = cream_sample(L_t, L_e, sigma, draws, doc_len=doc_len)
        except ValueError as e:
            out.append({"L_t": L_t, "L_e": L_e, "sigma": sigma, "doc_len": doc_len, "draws": draws,
                        "error": str(e)})
            continue
        r["token_offsets_runs"] = _compress(r.pop("token_offsets"))
        r["position_ids_runs"] = _compress(r.pop("position_ids"))
        r["loss_mask_sum"] = sum(r.pop("loss_mask"))
        out.append(r)
    print(json.dumps({"cases": out,
                      "rand_factor_probabilities_factor8_sigma3":
                          {k: round(v, 6) for k, v in rand_factor_probabilities(8, 3.0).items()}},
                     indent=1))
