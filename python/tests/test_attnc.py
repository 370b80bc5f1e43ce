"""The attnc Python package against the attnc CLI (bit for bit), against
torch (where installed), through prefill + decode with forks, and on its
error paths. Run from the source tree: python3 -m pytest python/tests
(ATTNC_BIN names the attnc executable, ATTNC_LIB_DIR its libattnc.so's
directory; both default to the source tree's build/)."""

import math
import os
import re
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import attnc

ROOT = Path(__file__).resolve().parent.parent.parent
SPECS = ROOT / "specs"
ATTNC = os.environ.get("ATTNC_BIN", str(ROOT / "build" / "compiler" / "attnc"))

# a small GQA block with RoPE (HF rotate_half), q/k/v biases, causal
GQA = """name: pygqa
heads: 4
kv_groups: 2
head_dim: 16
d_model: 64
causal: true
qkv_bias: true
rope:
  base: 10000
"""


def cli(*args):
    r = subprocess.run([ATTNC, *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def seed():
    return attnc.compile(SPECS / "seed.yaml")


@pytest.mark.parametrize("spec, tokens", [("seed", 21), ("gemma2_9b", 5), ("phi3_mini", 19),
                                          ("falcon_7b", 3)])
def test_forward_equals_attnc_run_bit_for_bit(tmp_path, spec, tokens):
    path = SPECS / (spec + ".yaml")
    w, x, y = tmp_path / "w.safetensors", tmp_path / "x.safetensors", tmp_path / "y.safetensors"
    cli("gen-weights", path, "-o", w)
    cli("gen-input", path, "--tokens", tokens, "-o", x)
    cli("run", path, "--weights", w, "--input", x, "-o", y)
    want = attnc.load_tensors(y)["y"]
    block = attnc.Block(attnc.compile(path), w)
    cache = block.cache(tokens)
    got = block.forward(cache, cache.new_seq(), attnc.load_tensors(x)["x"])
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.array_equal(got, want)


def torch_block(weights, cfg, x, mask=None):
    """The block in torch: projections, RoPE (rotate_half), GQA, causal
    softmax, or softmax under mask (bool [S, S], True where a query sees a key)."""
    torch = pytest.importorskip("torch")
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in weights.items()}
    X = torch.tensor(x, dtype=torch.float64)
    H, G, hd = cfg["heads"], cfg["kv_groups"], cfg["head_dim"]
    S = X.shape[0]
    q = (X @ t["q_proj.weight"].T + t["q_proj.bias"]).view(S, H, hd).transpose(0, 1)
    k = (X @ t["k_proj.weight"].T + t["k_proj.bias"]).view(S, G, hd).transpose(0, 1)
    v = (X @ t["v_proj.weight"].T + t["v_proj.bias"]).view(S, G, hd).transpose(0, 1)
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(S, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)

    def rot(a):
        a1, a2 = a[..., :hd // 2], a[..., hd // 2:]
        return a * cos + torch.cat([-a2, a1], -1) * sin

    q, k = rot(q), rot(k)
    k = k.repeat_interleave(H // G, dim=0)
    v = v.repeat_interleave(H // G, dim=0)
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    hidden = torch.ones(S, S, dtype=torch.bool).triu(1) if mask is None else ~torch.tensor(mask)
    if sdpa is not None:
        o = sdpa(q, k, v, attn_mask=~hidden)
    else:  # torch < 2.0: the same computation written out
        s = q @ k.transpose(-1, -2) / hd ** 0.5
        o = torch.softmax(s.masked_fill(hidden, float("-inf")), -1) @ v
    o = o.transpose(0, 1).reshape(S, H * hd)
    return (o @ t["o_proj.weight"].T).numpy()


def gqa_weights(rng, cfg):
    D, H, G, hd = cfg["d_model"], cfg["heads"], cfg["kv_groups"], cfg["head_dim"]

    def u(*shape):
        return (rng.uniform(-1, 1, shape) / np.sqrt(shape[-1])).astype(np.float32)

    return {"q_proj.weight": u(H * hd, D), "k_proj.weight": u(G * hd, D),
            "v_proj.weight": u(G * hd, D), "o_proj.weight": u(D, H * hd),
            "q_proj.bias": u(H * hd) * 0.1, "k_proj.bias": u(G * hd) * 0.1,
            "v_proj.bias": u(G * hd) * 0.1}


@pytest.mark.parametrize("tokens", [1, 7, 40])
def test_gqa_block_matches_torch(tokens):
    pytest.importorskip("torch")
    cfg = {"heads": 4, "kv_groups": 2, "head_dim": 16, "d_model": 64}
    rng = np.random.default_rng(tokens)
    w = gqa_weights(rng, cfg)
    x = rng.standard_normal((tokens, 64)).astype(np.float32)
    block = attnc.Block(attnc.compile(GQA), w)
    cache = block.cache(64)
    got = block.forward(cache, cache.new_seq(), x)
    want = torch_block(w, cfg, x)
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 1e-5, err


def test_token_and_sequence_inputs_match_torch_masks():
    """Packed documents (a token input) fed in chunks, and a prefix-LM (a
    sequence input), against SDPA with the dense masks they mean."""
    pytest.importorskip("torch")
    cfg = {"heads": 4, "kv_groups": 2, "head_dim": 16, "d_model": 64}
    rng = np.random.default_rng(3)
    w = gqa_weights(rng, cfg)
    x = rng.standard_normal((20, 64)).astype(np.float32)
    doc = np.array([0] * 5 + [1] * 9 + [2] * 6, dtype=np.int32)
    block = attnc.Block(attnc.compile(GQA + "inputs:\n  doc: {per: token}\n"
                                      "mask_mod: \"doc[q] == doc[kv]\"\n"), w)
    cache = block.cache(64)
    s = cache.new_seq()
    with pytest.raises(attnc.Error, match="no value of input 'doc' at positions 0..6"):
        block.forward(cache, s, x[:7])
    got = []
    for at in range(0, 20, 7):
        s.set_input("doc", doc[at:at + 7], first=at)
        got.append(block.forward(cache, s, x[at:at + 7]))
    want = torch_block(w, cfg, x, (doc[:, None] == doc[None, :]) & np.tri(20, dtype=bool))
    err = np.abs(np.concatenate(got) - want).max() / np.abs(want).max()
    assert err < 1e-5, err
    with pytest.raises(attnc.Error, match="has no input 'dco'"):
        s.set_input("dco", [1])

    plm = attnc.Block(attnc.compile(GQA.replace("causal: true", "causal: false") +
                                    "inputs:\n  prefix: {per: sequence}\n"
                                    "mask_mod: \"kv <= q or kv < prefix\"\n"), w)
    cache = plm.cache(64)
    s = cache.new_seq()
    s.set_input("prefix", 8)
    got = plm.forward(cache, s, x)
    mask = np.tri(20, dtype=bool)
    mask[:, :8] = True
    want = torch_block(w, cfg, x, mask)
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5


def test_t5_relative_bias_spec_matches_t5_buckets():
    """specs/t5_relative_bias.yaml's expression (at small shapes) against
    T5's bucketing as Hugging Face's modeling_t5.py computes it
    (T5Attention._relative_position_bucket, bidirectional=False, 32
    buckets, max_distance 128; compute_bias), in torch, over 200 tokens
    fed in chunks and one at a time (the split decode)."""
    torch = pytest.importorskip("torch")
    text = (SPECS / "t5_relative_bias.yaml").read_text()
    for key, val in (("heads", 4), ("head_dim", 16), ("d_model", 64)):
        text = re.sub(r"^%s: \d+$" % key, "%s: %d" % (key, val), text, flags=re.M)
    H, hd, D, S = 4, 16, 64, 200
    rng = np.random.default_rng(5)

    def u(*shape):
        return (rng.uniform(-1, 1, shape) / np.sqrt(shape[-1])).astype(np.float32)

    w = {"q_proj.weight": u(H * hd, D), "k_proj.weight": u(H * hd, D),
         "v_proj.weight": u(H * hd, D), "o_proj.weight": u(D, H * hd),
         "rel_bias": rng.uniform(-2, 2, (H, 32)).astype(np.float32)}
    x = rng.standard_normal((S, D)).astype(np.float32)
    block = attnc.Block(attnc.compile(text), w)
    got = []
    for chunk in (37, 1):
        cache = block.cache(S)
        seq = cache.new_seq()
        got.append(np.concatenate([block.forward(cache, seq, x[at:at + chunk])
                                   for at in range(0, S, chunk)]))
    # modeling_t5.py: n = -min(kv - q, 0); exact below 16, then logarithmic
    n = torch.clamp(torch.arange(S)[:, None] - torch.arange(S)[None, :], min=0)
    large = 16 + (torch.log(n.float() / 16) / math.log(128 / 16) * 16).to(torch.long)
    bucket = torch.where(n < 16, n, torch.clamp(large, max=31))
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in w.items()}
    X = torch.tensor(x, dtype=torch.float64)
    q, k, v = ((X @ t[p + "_proj.weight"].T).view(S, H, hd).transpose(0, 1) for p in "qkv")
    sc = q @ k.transpose(-1, -2) + t["rel_bias"][:, bucket]  # T5 does not scale q.k
    sc = sc.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    o = (torch.softmax(sc, -1) @ v).transpose(0, 1).reshape(S, H * hd)
    want = (o @ t["o_proj.weight"].T).numpy()
    for g in got:
        assert np.abs(g - want).max() / np.abs(want).max() < 1e-5


def test_prefill_decode_forks_and_truncate_match_one_shot():
    cfg = {"heads": 4, "kv_groups": 2, "head_dim": 16, "d_model": 64}
    rng = np.random.default_rng(7)
    w = gqa_weights(rng, cfg)
    block = attnc.Block(attnc.compile(GQA), w)
    cache = block.cache(512)
    prompt = rng.standard_normal((13, 64)).astype(np.float32)
    s = cache.new_seq()
    history = {}
    y0 = block.forward(cache, s, prompt)
    forks = [s.fork() for _ in range(2)]
    for q in [s] + forks:
        history[q.id] = ([prompt], [y0])
    seqs = [s] + forks
    for step in range(20):
        xs = [rng.standard_normal(64).astype(np.float32) for _ in seqs]  # one token: [d_model]
        ys = block.forward(cache, seqs, xs)
        for q, x, y in zip(seqs, xs, ys):
            assert y.shape == (64,)
            history[q.id][0].append(x[None])
            history[q.id][1].append(y[None])
    assert [len(q) for q in seqs] == [33, 33, 33]
    # every sequence's outputs equal a one-shot prefill of its whole input
    for q in seqs:
        xs, ys = (np.concatenate(a) for a in history[q.id])
        fresh = cache.new_seq()
        want = block.forward(cache, fresh, xs)
        fresh.free()
        assert np.abs(ys - want).max() <= 1e-4 * np.abs(want).max()
    # rolled back 10 tokens and fed the same ones again, one at a time:
    # the same outputs (decoding alone, not batched with the others)
    q = forks[1]
    xs, ys = (np.concatenate(a) for a in history[q.id])
    q.truncate(23)
    assert len(q) == 23
    again = np.stack([block.forward(cache, q, x) for x in xs[23:]])
    assert np.array_equal(again, ys[23:])
    # one batched call = the same calls one by one (each sequence's own keys)
    a, b = s.fork(), forks[0].fork()
    x1, x2 = (rng.standard_normal((3, 64)).astype(np.float32) for _ in range(2))
    both = block.forward(cache, [a, b], [x1, x2])
    s2, f2 = s.fork(), forks[0].fork()
    assert np.array_equal(both[0], block.forward(cache, s2, x1))
    assert np.array_equal(both[1], block.forward(cache, f2, x2))
    assert cache.stats()["sequences"] == 7


def test_prefix_cache_publishes_matches_and_refuses_bad_keys():
    import hashlib
    cfg = {"heads": 4, "kv_groups": 2, "head_dim": 16, "d_model": 64}
    rng = np.random.default_rng(9)
    block = attnc.Block(attnc.compile(GQA + "kv_cache: {block_tokens: 16}\n"), gqa_weights(rng, cfg))
    cache = block.cache(512)
    prompt = rng.standard_normal((40, 64)).astype(np.float32)
    keys, h = [], b""
    for i in range(2):  # chained: each key hashes the one before and its block
        h = hashlib.blake2b(h + prompt[16 * i:16 * (i + 1)].tobytes(), digest_size=8).digest()
        keys.append(int.from_bytes(h, "little"))
    s = cache.new_seq()
    want = block.forward(cache, s, prompt)
    with pytest.raises(attnc.Error, match="3 keys is longer than sequence 0's 2 full blocks"):
        cache.publish(s, keys + [5])
    with pytest.raises(attnc.Error, match="not an unsigned 64-bit"):
        cache.publish(s, [-1])
    cache.publish(s, keys)
    cache.publish(s, keys[:1])  # again: nothing changes
    st = cache.stats()
    assert (st["published_blocks"], st["evicted_blocks"], st["blocks_used"]) == (2, 0, 3)
    s.free()
    t, n = cache.from_prefix(keys + [123])
    assert n == 32 and len(t) == 32
    got = block.forward(cache, t, prompt[32:])
    assert np.abs(got - want[32:]).max() <= 1e-4 * np.abs(want).max()
    e, n = cache.from_prefix([keys[1]])  # block 1's key is not a chain's first
    assert n == 0 and len(e) == 0
    assert cache.stats()["blocks_used"] == 3


def test_draft_tree_equals_its_paths_and_accept_keeps_one():
    cfg = {"heads": 4, "kv_groups": 2, "head_dim": 16, "d_model": 64}
    rng = np.random.default_rng(11)
    block = attnc.Block(attnc.compile(GQA), gqa_weights(rng, cfg))
    cache = block.cache(256)
    prompt = rng.standard_normal((7, 64)).astype(np.float32)
    draft = rng.standard_normal((5, 64)).astype(np.float32)
    parents = [-1, 0, 0, 1, 3]  # paths 0-1-3-4 and 0-2
    s = cache.new_seq()
    block.forward(cache, s, prompt)
    ref = s.fork()
    y = block.forward_tree(cache, s, parents, draft)
    assert y.shape == (5, 64) and len(s) == 7
    want = block.forward(cache, ref, draft[[0, 1, 3, 4]])
    scale = np.abs(want).max()
    assert np.abs(y[[0, 1, 3, 4]] - want).max() <= 1e-5 * scale
    with pytest.raises(attnc.Error, match="keep is not a path"):
        s.accept([0, 2, 4])
    s.accept([0, 1, 3, 4])
    assert len(s) == 11
    nxt = rng.standard_normal(64).astype(np.float32)
    assert np.abs(block.forward(cache, s, nxt) - block.forward(cache, ref, nxt)).max() <= \
        1e-5 * scale
    with pytest.raises(attnc.Error, match="parent\\[1\\] is 1"):
        block.forward_tree(cache, s, [-1, 1], draft[:2])
    with pytest.raises(attnc.Error, match="one row per parent"):
        block.forward_tree(cache, s, [-1], draft[:2])


def test_kernels_config_holds_every_field_as_the_spec_set_it():
    k = attnc.compile(SPECS / "mistral_7b.yaml", cache=False)
    c = k.config
    # every attn_config field, named as in C, read through the runtime's table
    assert {"name", "heads", "kv_groups", "sliding_window", "rope_base", "kv_max_tokens",
            "mla_eps", "shard_count"} <= set(c)
    assert (c["name"], c["heads"], c["kv_groups"], c["head_dim"]) == ("mistral_7b", 32, 8, 128)
    assert c["sliding_window"] == 4096 and c["causal"] is True and c["softcap"] == 0.0
    assert c["rope_base"] == 10000.0 and c["kv_max_tokens"] == 8192
    assert abs(c["scale"] - 128 ** -0.5) < 1e-15 and c["scale_auto"] is True
    assert c["memory_dim"] == 0 and k.memory_dim == 0


def test_import_spec_equals_attnc_import_and_compiles(tmp_path):
    cfg = ROOT / "tests" / "data" / "hf" / "llama3_1_8b.json"
    text = attnc.import_spec(cfg, layer=3, dtype="bf16", max_tokens=1024)
    out = tmp_path / "l3.yaml"
    cli("import", cfg, "--layer", 3, "--dtype", "bf16", "--max-tokens", 1024, "-o", out)
    assert text == out.read_text()
    assert "name: llama_layer3" in text and "dtype: bf16" in text
    k = attnc.compile(text, cache=False)
    assert (k.heads, k.kv_groups, k.config["kv_max_tokens"]) == (32, 8, 1024)
    # a field attnc cannot express is an error naming it; a missing file says so
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", "num_attention_heads": 4, "hidden_size": 64,'
                   ' "rope_scaling": {"rope_type": "longrope", "factor": 2}}')
    with pytest.raises(attnc.Error, match="longrope"):
        attnc.import_spec(bad)
    with pytest.raises(attnc.Error, match="cannot open"):
        attnc.import_spec(tmp_path / "none.json")


def test_float16_input_is_accepted(seed, tmp_path):
    w = tmp_path / "w.safetensors"
    cli("gen-weights", SPECS / "seed.yaml", "-o", w)
    block = attnc.Block(seed, w)
    cache = block.cache(32)
    x = np.random.default_rng(3).standard_normal((5, 768)).astype(np.float16)
    y16 = block.forward(cache, cache.new_seq(), x)
    y32 = block.forward(cache, cache.new_seq(), x.astype(np.float32))
    assert y16.dtype == np.float32 and np.array_equal(y16, y32)


def test_weights_from_dict_equal_weights_from_file(tmp_path):
    cfg = {"heads": 4, "kv_groups": 2, "head_dim": 16, "d_model": 64}
    w = gqa_weights(np.random.default_rng(11), cfg)
    path = tmp_path / "w.safetensors"
    attnc.save_tensors(path, w)
    assert set(attnc.load_tensors(path)) == set(w)
    k = attnc.compile(GQA)
    x = np.random.default_rng(12).standard_normal((9, 64)).astype(np.float32)
    outs = []
    for weights in (w, path, str(path)):
        block = attnc.Block(k, weights)
        cache = block.cache(16)
        outs.append(block.forward(cache, cache.new_seq(), x))
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])


def test_shards_sum_to_the_whole_block():
    cfg = {"heads": 4, "kv_groups": 2, "head_dim": 16, "d_model": 64}
    w = gqa_weights(np.random.default_rng(21), cfg)
    x = np.random.default_rng(22).standard_normal((11, 64)).astype(np.float32)
    whole_block = attnc.Block(attnc.compile(GQA), w)
    cache = whole_block.cache(16)
    whole = whole_block.forward(cache, cache.new_seq(), x)
    total = np.zeros_like(whole)
    for i in range(2):
        k = attnc.compile(GQA, shard=(i, 2))
        assert k.heads == 2 and k.kv_groups == 1 and k.shard == (i, 2)
        block = attnc.Block(k, w)  # the whole block's weights: it keeps its slices
        cache = block.cache(16)
        total += block.forward(cache, cache.new_seq(), x)
    assert np.max(np.abs(total - whole)) <= 1e-5 * np.max(np.abs(whole))
    with pytest.raises(attnc.Error, match="do not split into 3 shards"):
        attnc.compile(GQA, shard=(0, 3))
    with pytest.raises(attnc.Error, match="expected 0 <= i < n"):
        attnc.compile(GQA, shard=(2, 2))


def test_forward_releases_the_gil(seed, tmp_path):
    w = tmp_path / "w.safetensors"
    cli("gen-weights", SPECS / "seed.yaml", "-o", w)
    block = attnc.Block(seed, w, threads=1)
    cache = block.cache(2048)
    x = np.random.default_rng(5).standard_normal((2048, 768)).astype(np.float32)
    span = []

    def work():
        s = cache.new_seq()
        t0 = time.perf_counter()
        block.forward(cache, s, x)
        span.extend([t0, time.perf_counter()])

    # this thread keeps running Python while the kernels run on the other
    ticks = []
    other = threading.Thread(target=work)
    other.start()
    while other.is_alive():
        ticks.append(time.perf_counter())
    other.join()
    # a held GIL would stop this thread for the whole call: one long gap
    inside = [t for t in ticks if span[0] < t < span[1]]
    gap = max(b - a for a, b in zip([span[0]] + inside, inside + [span[1]]))
    assert span[1] - span[0] > 0.02 and gap < 0.5 * (span[1] - span[0]), (span, gap)


def test_errors_carry_the_library_message(seed, tmp_path):
    # a spec error with its location
    with pytest.raises(attnc.Error, match=r"<yaml>:5:11: .*head_dim"):
        attnc.compile("name: bad\nheads: 4\nkv_groups: 2\nd_model: 64\nhead_dim: 0\n")
    with pytest.raises(attnc.Error, match="no_such.yaml"):
        attnc.compile(tmp_path / "no_such.yaml")
    with pytest.raises(attnc.Error, match="unknown pass"):
        attnc.compile(SPECS / "seed.yaml", disable_passes=["fuse_qvk"])
    # weights: a missing tensor is named
    w = gqa_weights(np.random.default_rng(1), {"heads": 4, "kv_groups": 2, "head_dim": 16,
                                               "d_model": 64})
    del w["k_proj.bias"]
    with pytest.raises(attnc.Error, match="k_proj.bias") as e:
        attnc.Block(attnc.compile(GQA), w)
    assert e.value.status is not None
    with pytest.raises(attnc.Error, match="No such file|cannot open|not found"):
        attnc.Block(seed, tmp_path / "missing.safetensors")
    wpath = tmp_path / "w.safetensors"
    cli("gen-weights", SPECS / "seed.yaml", "-o", wpath)
    block = attnc.Block(seed, wpath)
    cache = block.cache(16)
    s = cache.new_seq()
    with pytest.raises(attnc.Error, match=r"expected \[tokens, 768\]"):
        block.forward(cache, s, np.zeros((2, 767), np.float32))
    with pytest.raises(attnc.Error, match="2 sequences but 1 inputs"):
        block.forward(cache, [s, s.fork()], [np.zeros((1, 768))])
    # the cache is full: the library says so, nothing changed
    with pytest.raises(attnc.Error) as e:
        block.forward(cache, s, np.zeros((17, 768), np.float32))
    assert "block" in str(e.value) and len(s) == 0
    s.free()
    with pytest.raises(attnc.Error, match="unknown|freed"):
        block.forward(cache, s, np.zeros((1, 768), np.float32))
    with pytest.raises(attnc.Error, match="freed"):
        len(s)
    with pytest.raises(attnc.Error):
        cache.new_seq().truncate(5)
    # freed kernels or a closed block are refused, not run
    k2 = attnc.compile(SPECS / "seed.yaml")
    b2 = attnc.Block(k2, wpath)
    c2 = b2.cache(16)
    k2.free()
    with pytest.raises(attnc.Error, match="kernels were freed"):
        b2.forward(c2, c2.new_seq(), np.zeros((1, 768), np.float32))
    with pytest.raises(attnc.Error, match="kernels were freed"):
        b2.forward_tree(c2, c2.new_seq(), [-1], np.zeros((1, 768), np.float32))
    b2.close()
    with pytest.raises(attnc.Error, match="closed"):
        b2.forward(c2, c2.new_seq(), np.zeros((1, 768), np.float32))
    other = attnc.Block(seed, wpath).cache(16)
    with pytest.raises(attnc.Error, match="made by this block"):
        block.forward(other, other.new_seq(), np.zeros((1, 768), np.float32))


CROSS = """
name: cross_py
heads: 4
kv_groups: 2
head_dim: 16
d_model: 64
qkv_bias: true
k_bias: false
o_bias: true
cross_attention:
  memory_dim: 48
kv_cache:
  max_tokens: 256
"""


def torch_cross(w, x, memory, H=4, G=2, hd=16):
    """Cross-attention in float64: q from x, K/V from the memory, no mask."""
    torch = pytest.importorskip("torch")
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in w.items()}
    X, M = torch.tensor(x, dtype=torch.float64), torch.tensor(memory, dtype=torch.float64)
    S, N = X.shape[0], M.shape[0]
    q = (X @ t["q_proj.weight"].T + t["q_proj.bias"]).view(S, H, hd).transpose(0, 1)
    k = (M @ t["k_proj.weight"].T).view(N, G, hd).transpose(0, 1).repeat_interleave(H // G, 0)
    v = (M @ t["v_proj.weight"].T + t["v_proj.bias"]).view(N, G, hd).transpose(0, 1)
    v = v.repeat_interleave(H // G, 0)
    o = torch.softmax(q @ k.transpose(-1, -2) / hd ** 0.5, -1) @ v
    return (o.transpose(0, 1).reshape(S, H * hd) @ t["o_proj.weight"].T + t["o_proj.bias"]).numpy()


def test_cross_attention_matches_torch_and_says_what_is_wrong():
    rng = np.random.default_rng(30)

    def u(*shape):
        return (rng.uniform(-1, 1, shape) / np.sqrt(shape[-1])).astype(np.float32)

    w = {"q_proj.weight": u(64, 64), "k_proj.weight": u(32, 48), "v_proj.weight": u(32, 48),
         "o_proj.weight": u(64, 64), "q_proj.bias": u(64), "v_proj.bias": u(32),
         "o_proj.bias": u(64)}
    kernels = attnc.compile(CROSS)
    assert kernels.memory_dim == 48
    block = attnc.Block(kernels, w)
    cache = block.cache(256)
    memory = rng.standard_normal((150, 48)).astype(np.float32)
    x = rng.standard_normal((9, 64)).astype(np.float32)
    seq = cache.new_seq()
    with pytest.raises(attnc.Error, match="has no memory"):
        block.forward(cache, seq, x)
    with pytest.raises(attnc.Error, match=r"expected \[rows, 48\]"):
        seq.set_memory(memory[:, :40])
    seq.set_memory(memory)
    want = torch_cross(w, x, memory)
    got = np.concatenate([block.forward(cache, seq, x[:5])] +
                         [block.forward(cache, seq, x[i])[None] for i in range(5, 9)])
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5
    assert len(seq) == 9
    fork = seq.fork()  # shares the memory
    assert np.abs(block.forward(cache, fork, x[:2]) - want[:2]).max() / np.abs(want).max() < 1e-5
    with pytest.raises(attnc.Error, match="replaced only before the first forward"):
        seq.set_memory(memory)
    with pytest.raises(attnc.Error, match="is self-attention"):
        attnc.Block(attnc.compile(GQA), gqa_weights(rng, {"heads": 4, "kv_groups": 2,
                                                          "head_dim": 16, "d_model": 64})
                    ).cache(16).new_seq().set_memory(memory)


# ---- multi-head latent attention: the reference engine against transformers'
# modeling_deepseek_v3.py (DeepseekV3Attention.forward), written out in torch

def mla_spec(q_lora, style, yarn, o_bias):
    rope = f"rope:\n  base: 10000\n  style: {style}\n"
    if yarn:  # DeepSeek-V2-Lite's scaling, shrunk to this test's positions
        rope += ("  scaling:\n    type: yarn\n    factor: 8\n    original_max_position: 4\n"
                 "    beta_fast: 32\n    beta_slow: 1\n    mscale: 0.707\n"
                 "    mscale_all_dim: 0.707\n")
    return (f"name: pymla\nheads: 4\nd_model: 64\ncausal: true\no_bias: {str(o_bias).lower()}\n"
            f"mla:\n  q_lora_rank: {q_lora}\n  kv_lora_rank: 24\n  qk_nope_head_dim: 12\n"
            f"  qk_rope_head_dim: 8\n  v_head_dim: 10\n  eps: 1e-5\n{rope}"
            "kv_cache:\n  max_tokens: 64\n")


def torch_yarn_inv_freq(torch, dim, base, factor, orig, beta_fast, beta_slow):
    """modeling_rope_utils.py, _compute_yarn_parameters (truncate true)."""
    import math

    def corr(rot):
        return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
    low, high = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    pos = base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extra = 1 - ramp  # inv_freq_extrapolation_factor
    return (1 / (factor * pos)) * (1 - extra) + (1 / pos) * extra


def torch_mla(w, x, q_lora, style, yarn, H=4, nope=12, rope=8, vd=10, kvl=24, eps=1e-5):
    torch = pytest.importorskip("torch")
    import math
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in w.items()}
    X = torch.tensor(x, dtype=torch.float64)
    S, hd = X.shape[0], nope + rope

    def rms(v, g):
        return g * (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps))
    qs = X @ t["q_proj.weight"].T if q_lora == 0 else \
        rms(X @ t["q_a_proj.weight"].T, t["q_a_layernorm.weight"]) @ t["q_b_proj.weight"].T
    qs = qs.view(S, H, hd).transpose(0, 1)
    q_pass, q_rot = qs[..., :nope], qs[..., nope:]
    ckv = X @ t["kv_a_proj_with_mqa.weight"].T
    k_pass, k_rot = ckv[:, :kvl], ckv[:, kvl:]
    kv = (rms(k_pass, t["kv_a_layernorm.weight"]) @ t["kv_b_proj.weight"].T).view(S, H, nope + vd)
    kv = kv.transpose(0, 1)
    k_pass, v = kv[..., :nope], kv[..., nope:]
    k_rot = k_rot.view(1, S, rope)
    if yarn:
        inv = torch_yarn_inv_freq(torch, rope, 10000.0, 8.0, 4, 32, 1)
        m = lambda f, s: 1.0 if f <= 1 else 0.1 * s * math.log(f) + 1.0  # yarn_get_mscale
        att = m(8, 0.707) / m(8, 0.707)
        scaling = hd ** -0.5 * m(8, 0.707) ** 2
    else:
        inv = 1.0 / (10000.0 ** (torch.arange(0, rope, 2, dtype=torch.float64) / rope))
        att, scaling = 1.0, hd ** -0.5
    ang = torch.arange(S, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos() * att, emb.sin() * att

    def rotate_half(a):
        return torch.cat([-a[..., rope // 2:], a[..., :rope // 2]], -1)

    def apply(a):
        if style == "interleaved":  # apply_rotary_pos_emb_interleave's de-interleaving
            a = a.reshape(*a.shape[:-1], rope // 2, 2).transpose(-1, -2).reshape(a.shape)
        return a * cos + rotate_half(a) * sin
    q_rot, k_rot = apply(q_rot), apply(k_rot)
    q = torch.cat([q_pass, q_rot], -1)
    k = torch.cat([k_pass, k_rot.expand(H, S, rope)], -1)
    s = (q @ k.transpose(-1, -2)) * scaling
    s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    o = (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(S, H * vd) @ t["o_proj.weight"].T
    if "o_proj.bias" in t:
        o = o + t["o_proj.bias"]
    return o.numpy()


@pytest.mark.parametrize("q_lora, style, yarn, o_bias", [(0, "interleaved", True, False),
                                                         (32, "interleaved", False, True),
                                                         (32, "half", True, False),
                                                         (0, "half", False, False)])
def test_mla_reference_matches_torch(tmp_path, q_lora, style, yarn, o_bias):
    pytest.importorskip("torch")
    spec = tmp_path / "mla.yaml"
    spec.write_text(mla_spec(q_lora, style, yarn, o_bias))
    w, x, y = tmp_path / "w.safetensors", tmp_path / "x.safetensors", tmp_path / "y.safetensors"
    cli("gen-weights", spec, "-o", w)
    cli("gen-input", spec, "--tokens", 13, "-o", x)
    cli("run", spec, "--engine", "reference", "--chunk", 5, "--weights", w, "--input", x, "-o", y)
    weights = attnc.load_tensors(w)
    assert ("q_proj.weight" in weights) == (q_lora == 0)
    assert weights["kv_a_proj_with_mqa.weight"].shape == (24 + 8, 64)
    assert weights["kv_b_proj.weight"].shape == (4 * (12 + 10), 24)
    want = torch_mla(weights, attnc.load_tensors(x)["x"], q_lora, style, yarn)
    got = attnc.load_tensors(y)["y"]
    assert np.abs(got - want).max() / np.abs(want).max() < 2e-6


def test_mla_kernels_match_torch_through_the_python_api(tmp_path):
    pytest.importorskip("torch")
    spec = tmp_path / "mla.yaml"
    spec.write_text(mla_spec(32, "interleaved", True, True))
    w = tmp_path / "w.safetensors"
    cli("gen-weights", spec, "-o", w)
    weights = attnc.load_tensors(w)
    x = np.random.default_rng(26).standard_normal((13, 64)).astype(np.float32)
    block = attnc.Block(attnc.compile(spec), w)
    cache = block.cache(64)
    seq = cache.new_seq()
    got = np.concatenate([block.forward(cache, seq, x[:9])] +
                         [block.forward(cache, seq, x[i])[None] for i in range(9, 13)])
    want = torch_mla(weights, x, 32, "interleaved", True)
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5
