#!/usr/bin/env python3
"""An independent reading of a tarn export: BART and every attention kind and feature map,
written from docs/design.md (sections 2 and 3, and section 8's export format) and config.json alone, in NumPy (float64), one
example at a time and pair by pair (no chunks, no kernels, no padding). It scores
source<TAB>target pairs and prints the mean NLL and perplexity over the target tokens, as `tarn
eval` does for a model trained on pairs, so that the two can be compared
(tests/tools/reference_test.sh).

  bart_reference.py EXPORT_DIR PAIRS.tsv [--max-pairs N]

Needs numpy and sentencepiece (tools/setup.sh puts both in build/pyref).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

PAD, EOS = 1, 2


# --------------------------------------------------------------------------------------------
# Files

def load_safetensors(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", f"{name}: dtype {meta['dtype']}"
        begin, end = meta["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(meta["shape"]).astype(np.float64)
    return out


# --------------------------------------------------------------------------------------------
# Elementwise pieces

_erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.logaddexp(0.0, x)


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def softmax(s):
    s = s - s.max(-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(-1, keepdims=True)


# --------------------------------------------------------------------------------------------
# Attention (docs/design.md section 2), one example: x (N, D) queries' rows, m (M, D) the rows
# keys and values come from (x itself in self-attention).

class Attention:
    def __init__(self, w, favor, prefix, cfg, heads, causal, cross):
        self.w, self.favor, self.p, self.cfg = w, favor, prefix, cfg
        self.heads, self.causal, self.cross = heads, causal, cross

    def param(self, name):
        return self.w[f"{self.p}.{name}"]

    def linear(self, x, name, bias=True):
        y = x @ self.param(f"{name}.weight").T
        return y + self.param(f"{name}.bias") if bias else y

    def split(self, x):  # (N, D) -> (H, N, dh)
        n, d = x.shape
        return x.reshape(n, self.heads, d // self.heads).transpose(1, 0, 2)

    def merge(self, x):  # (H, N, dh) -> (N, D)
        h, n, dh = x.shape
        return x.transpose(1, 0, 2).reshape(n, h * dh)

    def visible(self, n, m, window):
        """mask[i, j]: key j is visible to query i."""
        i = np.arange(n)[:, None]
        j = np.arange(m)[None, :]
        mask = np.ones((n, m), dtype=bool)
        if self.causal:
            mask &= j <= i
        if window:
            mask &= (i - j < window) if self.causal else (np.abs(i - j) <= window // 2)
        return mask

    def softmax_part(self, q, k, v, window):
        dh = q.shape[-1]
        s = (q / math.sqrt(dh)) @ k.transpose(0, 2, 1)
        mask = self.visible(q.shape[1], k.shape[1], window)
        s = np.where(mask, s, -np.inf)
        out = np.zeros(q.shape[:2] + (v.shape[-1],))
        rows = mask.any(1)  # a query whose window holds no key gets 0
        out[:, rows] = softmax(s[:, rows]) @ v
        return out

    def routed_part(self, x, q, k, v):
        """Routed cross-attention: level 1's landmarks are the chunks' mean keys and values, the
        next level's the means of its chunks, as many levels as a source of max_keys needs for at
        most route_root at the top (1 when route_root is 0). Per query: softmax over the top
        level's landmarks and its best; at each level below, softmax over the children of those
        chosen and their best (ties to the earlier): route_top of level 1 (the keys' chunks),
        route_beam (0: route_top) of a level above; the compressed read is the mean of the
        levels' reads; softmax over the keys of the chunks chosen last; mixed by the gate."""
        c, top, root = self.cfg["route_chunk"], self.cfg["route_top"], self.cfg.get("route_root", 0)
        beam = self.cfg.get("route_beam", 0) or top
        dh = q.shape[-1]
        depth, n = 1, -(-self.cfg["max_keys"] // c)
        while root > 0 and n > root:
            depth, n = depth + 1, -(-n // c)
        levels = [(k, v)]  # level 0, the keys; then the landmarks, level by level
        while len(levels) <= depth:
            lk, lv = levels[-1]
            starts = range(0, lk.shape[1], c)
            levels.append((np.stack([lk[:, j:j + c].mean(1) for j in starts], 1),
                           np.stack([lv[:, j:j + c].mean(1) for j in starts], 1)))

        def best(s, allowed, level):  # (H, N, n) scores of a level -> its best allowed, as a mask
            picks = top if level == 1 else beam
            order = np.argsort(-np.where(allowed, s, -np.inf), axis=-1, kind="stable")[..., :picks]
            chosen = np.zeros(s.shape, dtype=bool)
            np.put_along_axis(chosen, order, True, axis=-1)
            return chosen & allowed

        def read(lk, lv, allowed):
            s = (q / math.sqrt(dh)) @ lk.transpose(0, 2, 1)
            return softmax(np.where(allowed, s, -np.inf)) @ lv, s

        lk, lv = levels[-1]
        compressed, s = read(lk, lv, np.ones((q.shape[0], q.shape[1], lk.shape[1]), dtype=bool))
        chosen = best(s, np.ones(s.shape, dtype=bool), depth)
        for level in range(depth - 1, -1, -1):
            lk, lv = levels[level]
            allowed = chosen[..., np.arange(lk.shape[1]) // c]  # the children of the chosen chunks
            r, s = read(lk, lv, allowed)
            if level == 0:
                selected = r
                break
            compressed = compressed + r
            chosen = best(s, allowed, level)
        compressed = compressed / (len(levels) - 1)
        g = sigmoid(self.linear(x, "route_gate")).T[:, :, None]  # (H, N, 1)
        return g * selected + (1.0 - g) * compressed

    def kernel(self, q, k):
        """(H, N, M) φ(q_i)·φ(k_j) of the linear kinds (the Taylor map as the kernel it is)."""
        fmap = self.cfg["feature_map"]
        if fmap == "taylor":
            proj = self.param("taylor_proj.weight")  # (r, dh)
            r, order = self.cfg["taylor_dim"], self.cfg["taylor_order"]
            s = (q @ proj.T) @ (k @ proj.T).transpose(0, 2, 1) / math.sqrt(r)
            return sum(s ** n / math.factorial(n) for n in range(order + 1))
        return self.features(q, "q") @ self.features(k, "k").transpose(0, 2, 1)

    def features(self, x, role):
        fmap = self.cfg["feature_map"]
        if fmap == "elu1":
            return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))
        if fmap == "relu":
            return np.maximum(x, 0.0)
        if fmap == "identity":
            return x
        if fmap == "exp":  # exp(x - max x) per row, queries and keys alike
            return np.exp(x - x.max(-1, keepdims=True))
        if fmap == "hedgehog":  # [softmax(W x), softmax(-W x)], W (H, dh, dh) per head
            p = np.einsum("hnd,hed->hne", x, self.param(f"hedgehog_{role}"))
            return np.concatenate([softmax(p), softmax(-p)], -1)
        if fmap == "favor":
            w = self.favor[f"{self.p}.favor_projection"]  # (m, dh)
            xs = x / x.shape[-1] ** 0.25
            z = xs @ w.T - (xs * xs).sum(-1, keepdims=True) / 2
            # The stabiliser s: a query's own max; the max over a head's keys (none in causal
            # self-attention, where a decoded token must see the values training saw). It
            # scales a row's or a head's features alike, so it reaches the output only through
            # the normaliser's eps.
            if role == "q":
                z = z - z.max(-1, keepdims=True)
            elif not self.causal:
                z = z - z.max(axis=(-2, -1), keepdims=True)
            return np.exp(z) / math.sqrt(w.shape[0])
        raise SystemExit(f"bart_reference: feature map {fmap} is not written here")

    def linear_part(self, q, k, v, decayed=True):
        a = self.kernel(q, k) * self.visible(q.shape[1], k.shape[1], 0)
        gamma = self.cfg.get("align_decay", 0.0) if decayed else 0.0
        if gamma > 0:  # aligned cross-attention: head h weighs |i - j| by its decay
            heads, n, m = a.shape
            decays = [1.0] + [max(1e-3, gamma ** (2 ** (h - 1))) for h in range(1, heads)]
            dist = np.abs(np.arange(n)[:, None] - np.arange(m)[None, :])
            a = a * np.stack([d ** dist for d in decays])
        return (a @ v) / (a.sum(-1, keepdims=True) + self.cfg["eps"])

    def delta_part(self, x, m, qp, kp, vp):
        """The gated delta rule's layer output before out_proj, per head (H, N, dh)."""
        conv = lambda z, name: silu(causal_conv(z, self.param(f"delta.{name}")))
        unit = lambda z: z / np.sqrt((z * z).sum(-1, keepdims=True) + 1e-6)
        k = unit(self.split(conv(kp, "k_conv")))
        v = self.split(conv(vp, "v_conv"))
        beta = sigmoid(self.linear(m, "delta.beta_proj")).T  # (H, M)
        rate = softplus(self.linear(m, "delta.alpha_proj") + self.param("delta.dt_bias"))
        alpha = np.exp(-rate * np.exp(self.param("delta.A_log"))).T
        erase = self.cfg["kind"] != "gated" and self.cfg.get("global") != "gated"
        if self.cross:  # one state over the source; queries read it unconvolved
            q = unit(self.split(qp))
            state = delta_scan(k, v, beta, alpha, erase)[1]
            o = q @ state
        else:
            q = unit(self.split(conv(qp, "q_conv")))
            o = delta_scan(k, v, beta, alpha, erase, q)[0]
            if not self.causal:  # the encoder: a reverse scan too, summed
                rev = lambda z: z[:, ::-1]
                o = o + rev(delta_scan(rev(k), rev(v), rev(beta), rev(alpha), erase, rev(q))[0])
        o = o / np.sqrt((o * o).mean(-1, keepdims=True) + 1e-5) * self.param("delta.output_norm.weight")
        gate = silu(self.linear(x, "delta.gate_proj"))
        return self.split(self.merge(o) * gate)

    def __call__(self, x, m):
        kind = self.cfg["kind"]
        qp, kp, vp = self.linear(x, "q_proj"), self.linear(m, "k_proj"), self.linear(m, "v_proj")
        if kind in ("delta", "gated"):
            return self.linear(self.merge(self.delta_part(x, m, qp, kp, vp)), "out_proj")
        q, k, v = self.split(qp), self.split(kp), self.split(vp)
        if kind == "softmax":
            ctx = self.softmax_part(q, k, v, 0)
        elif kind == "linear":
            ctx = self.linear_part(q, k, v)
            if self.cfg.get("align_gate", False):  # g aligned + (1 - g) plain, per head and position
                plain = self.linear_part(q, k, v, decayed=False)
                g = sigmoid(self.linear(x, "align_gate")).T[:, :, None]  # (H, N, 1)
                ctx = plain + g * (ctx - plain)
        elif kind == "hybrid":
            local = self.softmax_part(q, k, v, self.cfg["window"])
            if self.cfg.get("global", "linear") == "linear":
                glob = self.linear_part(q, k, v)
            else:
                glob = self.delta_part(x, m, qp, kp, vp)
            g = sigmoid(self.linear(x, "hybrid_gate")).T[:, :, None]  # (H, N, 1)
            ctx = g * local + (1.0 - g) * glob
        elif kind == "routed":
            ctx = self.routed_part(x, q, k, v)
        else:
            raise SystemExit(f"bart_reference: attention kind {kind} is not written here")
        return self.linear(self.merge(ctx), "out_proj")


def causal_conv(x, w):
    """Depthwise and causal: row i of w (taps, D) weighs the token i positions back."""
    y = np.zeros_like(x)
    for i in range(w.shape[0]):
        y[i:] += w[i] * x[: x.shape[0] - i]
    return y


def delta_scan(k, v, beta, alpha, erase, q=None):
    """Token by token, per head: S_t = α_t S + k_t w_tᵀ, w_t = β_t (v_t − α_t Sᵀk_t) (β_t v_t
    without the erase); o_t = S_tᵀ q_t. Returns the outputs (with q) and the final state."""
    h, n, dk = k.shape
    state = np.zeros((h, dk, v.shape[-1]))
    out = np.zeros((h, n, v.shape[-1])) if q is not None else None
    for t in range(n):
        a = alpha[:, t, None, None]
        u = np.einsum("hij,hi->hj", state, k[:, t])
        w = beta[:, t, None] * (v[:, t] - alpha[:, t, None] * u) if erase else beta[:, t, None] * v[:, t]
        state = a * state + k[:, t, :, None] * w[:, None, :]
        if q is not None:
            out[:, t] = np.einsum("hij,hi->hj", state, q[:, t])
    return out, state


# --------------------------------------------------------------------------------------------
# The model (docs/design.md section 3)

def layer_configs(stack, layers):
    """Each layer's setting: the stack's `layers` list (complete entries, read alone), or the
    stack's own object for every layer (docs/design.md section 8, "The export format")."""
    per = stack.get("layers")
    if per and len(per) != layers:
        raise SystemExit(f"bart_reference: {len(per)} per-layer entries for {layers} layers")
    return per if per else [stack] * layers


class Bart:
    def __init__(self, folder):
        with open(os.path.join(folder, "config.json")) as f:
            self.c = json.load(f)
        self.w = load_safetensors(os.path.join(folder, "model.safetensors"))
        favor = os.path.join(folder, "tarn_favor_projections.safetensors")  # FAVOR+'s W, if any
        self.favor = load_safetensors(favor) if os.path.exists(favor) else {}
        c, t = self.c, self.c["tarn"]
        self.eps = t["layer_norm_eps"]
        self.scale = math.sqrt(c["d_model"]) if c["scale_embedding"] else 1.0
        enc_cfg = layer_configs(t["encoder_self_attention"], c["encoder_layers"])
        dec_cfg = layer_configs(t["decoder_self_attention"], c["decoder_layers"])
        # routed's tree is as deep as a source of the encoder's learned positions needs
        cross_cfg = [dict(cfg, max_keys=c["max_position_embeddings"])
                     for cfg in layer_configs(t["cross_attention"], c["decoder_layers"])]
        eh, dh = c["encoder_attention_heads"], c["decoder_attention_heads"]
        def stack(name, cfgs, heads, causal, cross):
            return [Attention(self.w, self.favor, f"model.{name.format(i)}", cfg, heads, causal, cross)
                    for i, cfg in enumerate(cfgs)]
        self.enc = stack("encoder.layers.{}.self_attn", enc_cfg, eh, False, False)
        self.dec = stack("decoder.layers.{}.self_attn", dec_cfg, dh, True, False)
        self.cross = stack("decoder.layers.{}.encoder_attn", cross_cfg, dh, False, True)

    def ln(self, x, name):
        return layer_norm(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.eps)

    def ffn(self, x, p):
        h = gelu(x @ self.w[f"{p}.fc1.weight"].T + self.w[f"{p}.fc1.bias"])
        return h @ self.w[f"{p}.fc2.weight"].T + self.w[f"{p}.fc2.bias"]

    def embed(self, ids, stack):
        x = self.w["model.shared.weight"][ids] * self.scale
        x = x + self.w[f"model.{stack}.embed_positions.weight"][np.arange(len(ids)) + 2]
        return self.ln(x, f"model.{stack}.layernorm_embedding")

    def nll(self, source, target):
        """Summed NLL of target's tokens given source (ids, each ending with </s>)."""
        x = self.embed(source, "encoder")
        for i, attn in enumerate(self.enc):
            p = f"model.encoder.layers.{i}"
            x = self.ln(x + attn(x, x), f"{p}.self_attn_layer_norm")
            x = self.ln(x + self.ffn(x, p), f"{p}.final_layer_norm")
        y = self.embed([EOS] + target[:-1], "decoder")
        for i, (self_attn, cross) in enumerate(zip(self.dec, self.cross)):
            p = f"model.decoder.layers.{i}"
            y = self.ln(y + self_attn(y, y), f"{p}.self_attn_layer_norm")
            y = self.ln(y + cross(y, x), f"{p}.encoder_attn_layer_norm")
            y = self.ln(y + self.ffn(y, p), f"{p}.final_layer_norm")
        logits = y @ self.w["model.shared.weight"].T + self.w["final_logits_bias"].reshape(-1)
        logits = logits - logits.max(-1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        return -logp[np.arange(len(target)), target].sum()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export", help="a folder written by tarn export")
    ap.add_argument("pairs", help="source<TAB>target lines")
    ap.add_argument("--max-pairs", type=int, default=0, help="score the first N pairs only (0: all)")
    args = ap.parse_args()
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(args.export, "spm.model"))
    model = Bart(args.export)
    # tarn cuts each side to its limit less one, then appends </s> (docs/design.md section 3)
    max_src, max_tgt = model.c["tarn"]["max_source_len"], model.c["tarn"]["max_target_len"]
    total, tokens = 0.0, 0
    with open(args.pairs, encoding="utf-8") as f:
        for n, line in enumerate(f):
            if args.max_pairs and n >= args.max_pairs:
                break
            source, target = line.rstrip("\n").split("\t")
            src = sp.encode(source)[: max_src - 1] + [EOS]
            tgt = sp.encode(target)[: max_tgt - 1] + [EOS]
            total += model.nll(src, tgt)
            tokens += len(tgt)
    print(f"nll {total / tokens:.6f}")
    print(f"ppl {math.exp(total / tokens):.4f}")
    print(f"tokens {tokens}")


if __name__ == "__main__":
    sys.exit(main())
