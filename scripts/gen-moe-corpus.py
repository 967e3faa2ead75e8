#!/usr/bin/env python3
# gen-moe-corpus.py — writes the qwen3moe seeds of the GGUF fuzz corpus (tests/fuzz/corpus, named
# by sha1 like libFuzzer's): tiny qwen3moe files with one inconsistency each, which
# test_gguf_corpus loads as models and requires to fail with one line. Needs gguf-py (.venv).
#   .venv/bin/python scripts/gen-moe-corpus.py tests/fuzz/corpus
import hashlib, os, shutil, sys
import numpy as np
import gguf

E, H, HKV, D, NE, K, F = 8, 2, 1, 4, 4, 2, 16
def write(path, ne=NE, k=K, fexp=F, shapes=None, drop=()):
    w = gguf.GGUFWriter(path, "qwen3moe")
    w.add_uint32("qwen3moe.block_count", 1)
    w.add_uint32("qwen3moe.context_length", 64)
    w.add_uint32("qwen3moe.embedding_length", E)
    w.add_uint32("qwen3moe.feed_forward_length", 16)
    w.add_uint32("qwen3moe.attention.head_count", H)
    w.add_uint32("qwen3moe.attention.head_count_kv", HKV)
    w.add_uint32("qwen3moe.attention.key_length", D)
    w.add_uint32("qwen3moe.attention.value_length", D)
    w.add_float32("qwen3moe.attention.layer_norm_rms_epsilon", 1e-6)
    if "expert_count" not in drop: w.add_uint32("qwen3moe.expert_count", ne)
    if "expert_used_count" not in drop: w.add_uint32("qwen3moe.expert_used_count", k)
    w.add_uint32("qwen3moe.expert_feed_forward_length", fexp)
    r = np.random.default_rng(0)
    t = {"token_embd.weight": (4, E), "output_norm.weight": (E,), "blk.0.attn_norm.weight": (E,),
         "blk.0.attn_q.weight": (H * D, E), "blk.0.attn_k.weight": (HKV * D, E), "blk.0.attn_v.weight": (HKV * D, E),
         "blk.0.attn_output.weight": (E, H * D), "blk.0.attn_q_norm.weight": (D,), "blk.0.attn_k_norm.weight": (D,),
         "blk.0.ffn_norm.weight": (E,), "blk.0.ffn_gate_inp.weight": (NE, E),
         "blk.0.ffn_gate_exps.weight": (NE, F, E), "blk.0.ffn_up_exps.weight": (NE, F, E),
         "blk.0.ffn_down_exps.weight": (NE, E, F)}
    t.update(shapes or {})
    for n, s in t.items():
        w.add_tensor(n, r.standard_normal(s).astype(np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()

cases = {
    "k-gt-experts": dict(k=5),
    "zero-experts": dict(ne=0),
    "no-top-k": dict(drop=("expert_used_count",)),
    "router-mismatch": dict(ne=3),
    "exps-2d": dict(shapes={"blk.0.ffn_up_exps.weight": (NE * F, E)}),
    "exps-swapped": dict(shapes={"blk.0.ffn_down_exps.weight": (NE, F, E)}),
    "exps-fewer": dict(shapes={"blk.0.ffn_gate_exps.weight": (NE - 1, F, E)}),
}
out = sys.argv[1]
tmp = os.path.join(out, ".moe-seed.tmp")
for name, kw in cases.items():
    write(tmp, **kw)
    data = open(tmp, "rb").read()
    h = hashlib.sha1(data).hexdigest()
    shutil.copy(tmp, os.path.join(out, h))
    print(name, h, len(data))
os.remove(tmp)
