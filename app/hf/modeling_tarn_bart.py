"""tarn's BART for HuggingFace transformers (PyTorch), shipped inside every `tarn export` whose
attention is anything but softmax everywhere. config.json names this file in its `auto_map`:

    from transformers import AutoModelForSeq2SeqLM
    model = AutoModelForSeq2SeqLM.from_pretrained(export_dir, trust_remote_code=True)

then computes what tarn trained, every attention kind of docs/design.md (section 2, and the
export's format in section 8), written from that page: softmax; linear with the feature maps
elu1, relu, exp, identity, favor, taylor, hedgehog; aligned cross-attention (align_decay, and
align_gate's mix of it with the plain read); the
gated delta rule (delta, gated); hybrid (a softmax window with a linear, delta or gated global
part); a list per layer (tarn.<stack>.layers). `generate()` decodes through a cache: softmax
keeps keys and values, linear attention its state S and normaliser z, the delta rule its state
and the convolutions' last conv_size - 1 inputs, cross-attention what it reads of the source.

Training is not the point here (no dropout): tarn trains, this file reads. A folder on disk only
(tarn_favor_projections.safetensors, FAVOR+'s random matrices, is read beside model.safetensors).
"""
import itertools
import math
import os

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BartConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

try:  # transformers >= 4.45 moves generate() out of PreTrainedModel
    from transformers.generation import GenerationMixin
except ImportError:  # pragma: no cover
    GenerationMixin = object

# What config.json's "problem_type" says: PretrainedConfig refuses a value it does not know, with
# its text, so plain BartForConditionalGeneration.from_pretrained fails instead of running softmax
# attention; TarnBartConfig takes it out (and writes it back when saved).
REFUSAL = ("tarn_bart (not softmax attention): BartForConditionalGeneration would compute another model; "
           "load it with AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True)")


class TarnBartConfig(BartConfig):
    model_type = "tarn_bart"

    def __init__(self, tarn=None, **kwargs):
        if kwargs.get("problem_type") == REFUSAL:  # the refusal is for plain BART only
            kwargs.pop("problem_type")
        super().__init__(**kwargs)
        self.tarn = tarn or {}

    def to_dict(self):
        d = super().to_dict()
        d["problem_type"] = REFUSAL
        return d


def layer_settings(stack, layers):
    """A stack's settings for each of its layers: the `layers` list (each entry resolved in
    full) when the export has one, else the stack's own settings for every layer."""
    per = stack.get("layers")
    if per:
        if len(per) != layers:
            raise ValueError(f"tarn config: {len(per)} per-layer entries for {layers} layers")
        return per
    return [stack] * layers


def global_kind(cfg):
    """What the global part of the kind computes: linear, delta, gated or None (softmax)."""
    kind = cfg["kind"]
    if kind in ("linear", "delta", "gated"):
        return kind
    if kind == "hybrid":
        return cfg.get("global", "linear")
    if kind in ("softmax", "routed"):
        return None
    raise ValueError(f"tarn config: attention kind {kind!r} is not known to this file")


def unit(x):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def taylor_monomials(r, order):
    """The Taylor map's features (docs/design.md section 2): every multiset of at most `order`
    indices in [0, r), by degree, then lexicographically; with 1/sqrt(alpha!) each."""
    idx, scale = [], []
    for n in range(order + 1):
        for combo in itertools.combinations_with_replacement(range(r), n):
            idx.append(combo)
            scale.append(1.0 / math.sqrt(math.prod(math.factorial(combo.count(i)) for i in set(combo))))
    return idx, scale


class DeltaBlock(nn.Module):
    """The gated delta rule's parameters around q, k, v (docs/design.md section 2)."""

    def __init__(self, d, heads, taps, cross):
        super().__init__()
        self.heads, self.cross = heads, cross
        # `beta_proj`: transformers 4.x renames a loaded key holding "beta" to "bias"
        # (a TensorFlow legacy); _load_from_state_dict below takes either name.
        self.beta_proj = nn.Linear(d, heads)
        self.alpha_proj = nn.Linear(d, heads)
        self.gate_proj = nn.Linear(d, d)
        self.A_log = nn.Parameter(torch.zeros(heads))
        self.dt_bias = nn.Parameter(torch.zeros(heads))
        if not cross:
            self.q_conv = nn.Parameter(torch.zeros(taps, d))
        self.k_conv = nn.Parameter(torch.zeros(taps, d))
        self.v_conv = nn.Parameter(torch.zeros(taps, d))
        self.output_norm = nn.Module()
        self.output_norm.weight = nn.Parameter(torch.ones(d // heads))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name in list(state_dict):
            if name.startswith(prefix + "bias_proj."):
                state_dict[prefix + "beta_proj." + name[len(prefix + "bias_proj."):]] = state_dict.pop(name)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def beta_alpha(self, x, mask):
        """(B, H, N) each; a padded position writes nothing (beta 0, alpha 1)."""
        beta = torch.sigmoid(self.beta_proj(x))
        rate = F.softplus(self.alpha_proj(x) + self.dt_bias)
        alpha = torch.exp(-rate * torch.exp(self.A_log))
        if mask is not None:
            beta = beta * mask[..., None]
            alpha = torch.where(mask[..., None] > 0, alpha, torch.ones_like(alpha))
        return beta.transpose(1, 2), alpha.transpose(1, 2)

    @staticmethod
    def conv(x, w, tail=None):
        """Causal, depthwise: row i of w (taps, D) weighs the input i positions back; `tail`
        holds the inputs before x (decoding). Then SiLU."""
        if tail is not None:
            x_full = torch.cat([tail, x], 1)
        else:
            x_full = F.pad(x, (0, 0, w.shape[0] - 1, 0))
        n = x.shape[1]
        y = torch.zeros_like(x)
        for i in range(w.shape[0]):
            start = x_full.shape[1] - n - i
            y = y + w[i] * x_full[:, start:start + n]
        return F.silu(y)

    def finish(self, o, y):
        """o (B, H, N, dh) -> (B, N, D): per-head RMS norm, output_norm.weight (one vector,
        shared by the heads), times silu(gate_proj(query row))."""
        o = o / torch.sqrt((o * o).mean(-1, keepdim=True) + 1e-5) * self.output_norm.weight
        b, h, n, dh = o.shape
        return o.transpose(1, 2).reshape(b, n, h * dh) * F.silu(self.gate_proj(y))


def delta_scan(k, v, beta, alpha, erase, q=None, state=None):
    """Token by token, per (batch, head): S_t = a_t S + k_t w_t^T, w_t = b_t (v_t - a_t S^T k_t)
    (b_t v_t without the erase); o_t = S_t^T q_t. Returns (outputs or None, final state)."""
    b, h, n, dk = k.shape
    if state is None:
        state = k.new_zeros(b, h, dk, v.shape[-1])
    outs = []
    for t in range(n):
        a = alpha[:, :, t, None, None]
        kt = k[:, :, t]
        if erase:
            u = torch.einsum("bhij,bhi->bhj", state, kt)
            w = beta[:, :, t, None] * (v[:, :, t] - alpha[:, :, t, None] * u)
        else:
            w = beta[:, :, t, None] * v[:, :, t]
        state = a * state + kt[..., :, None] * w[..., None, :]
        if q is not None:
            outs.append(torch.einsum("bhij,bhi->bhj", state, q[:, :, t]))
    return (torch.stack(outs, 2) if q is not None else None), state


class TarnAttention(nn.Module):
    """One attention module of kind cfg (a resolved entry of config.json's tarn section).
    x (B, N, D) the querying rows; m (B, M, D) the rows keys and values come from."""

    def __init__(self, cfg, d, heads, causal, cross):
        super().__init__()
        self.cfg, self.heads, self.dh, self.causal, self.cross = cfg, heads, d // heads, causal, cross
        self.kind, self.glob = cfg["kind"], global_kind(cfg)
        if self.cross and self.kind == "hybrid" and self.glob != "linear":
            raise ValueError("tarn config: hybrid cross-attention needs global: linear")
        self.k_proj, self.v_proj, self.q_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))
        if self.kind == "hybrid":
            self.hybrid_gate = nn.Linear(d, heads)
        if self.kind == "routed":
            if not self.cross:
                raise ValueError("tarn config: kind routed is cross-attention only")
            self.route_gate = nn.Linear(d, heads)  # mixes the selected read with the landmarks'
        if self.cross and self.kind == "linear" and cfg.get("align_gate", False):
            self.align_gate = nn.Linear(d, heads)  # mixes the decayed read with the plain one
        self.fmap = cfg.get("feature_map", "elu1") if self.glob == "linear" else None
        if self.fmap == "taylor":
            r, order = cfg["taylor_dim"], cfg["taylor_order"]
            self.taylor_proj = nn.Linear(self.dh, r, bias=False)
            idx, scale = taylor_monomials(r, order)
            width = max(len(c) for c in idx)
            # index r is a 1 appended to u: a monomial of lower degree pads with it
            self.register_buffer("taylor_idx", torch.tensor([list(c) + [r] * (width - len(c)) for c in idx]),
                                 persistent=False)
            self.register_buffer("taylor_scale", torch.tensor(scale, dtype=torch.float64), persistent=False)
        elif self.fmap == "hedgehog":
            self.hedgehog_q = nn.Parameter(torch.eye(self.dh).repeat(heads, 1, 1))
            self.hedgehog_k = nn.Parameter(torch.eye(self.dh).repeat(heads, 1, 1))
        elif self.fmap == "favor":  # filled from tarn_favor_projections.safetensors
            self.register_buffer("favor_projection", torch.zeros(cfg["favor_features"] or self.dh, self.dh), persistent=False)
        if self.glob in ("delta", "gated"):
            self.delta = DeltaBlock(d, heads, cfg["conv_size"], cross)

    # ---- shapes
    def split(self, x):  # (B, N, D) -> (B, H, N, dh)
        b, n, _ = x.shape
        return x.view(b, n, self.heads, self.dh).transpose(1, 2)

    def merge(self, x):  # (B, H, N, dh) -> (B, N, D)
        b, h, n, dh = x.shape
        return x.transpose(1, 2).reshape(b, n, h * dh)

    # ---- the window / softmax part
    def visible(self, qpos, kpos, window, kmask):
        """(B or 1, 1, N, M) bool: key j visible to query i."""
        i, j = qpos[:, None], kpos[None, :]
        vis = torch.ones(len(qpos), len(kpos), dtype=torch.bool, device=qpos.device)
        if self.causal:
            vis &= j <= i
        if window:
            vis &= (i - j < window) if self.causal else ((i - j).abs() <= window // 2)
        vis = vis[None, None]
        if kmask is not None:
            vis = vis & (kmask[:, None, None, :] > 0)
        return vis

    def softmax_part(self, q, k, v, vis):
        s = (q / math.sqrt(self.dh)) @ k.transpose(-1, -2)
        s = s.masked_fill(~vis, float("-inf"))
        p = torch.nan_to_num(torch.softmax(s, -1), nan=0.0)  # a query that sees no key: 0
        return p @ v

    # ---- routed cross-attention: landmarks (chunk means), a tree of them as deep as the longest
    # source needs for at most route_root at the top, route_beam (0: route_top) chosen at each level
    # above the keys' chunks, and the route_top best chunks read key by key
    @staticmethod
    def chunk_means(k, v, keep, c):
        """k, v (B, H, N, dh), keep (B, N) 0/1 -> the chunks' means over their kept rows, and 1 where
        a chunk keeps any."""
        n = k.shape[2]
        chunk_of = torch.arange(n, device=k.device) // c
        pool = F.one_hot(chunk_of, (n + c - 1) // c).to(k.dtype)[None] * keep[:, :, None]  # (B, N, Nc)
        count = pool.sum(1)  # (B, Nc)
        pool = (pool / count.clamp(min=1)[:, None, :]).transpose(1, 2)[:, None]
        return pool @ k, pool @ v, (count > 0).to(k.dtype)

    @staticmethod
    def best(s, allowed, top):
        """The `top` highest scores of each row among those allowed, as a mask (ties: the earlier)."""
        order = torch.sort(s.masked_fill(~allowed, float("-inf")), stable=True, dim=-1, descending=True).indices
        return torch.zeros_like(allowed).scatter(-1, order[..., :top], True) & allowed

    def routed_part(self, x, q, k, v, kmask):
        b, h, nk, dh = k.shape
        c, top, root = self.cfg["route_chunk"], self.cfg["route_top"], self.cfg.get("route_root", 0)
        beam = self.cfg.get("route_beam", 0) or top
        keep = torch.ones(b, nk, dtype=k.dtype, device=k.device) if kmask is None else (kmask > 0).to(k.dtype)
        depth, n = 1, -(-self.cfg["max_keys"] // c)
        while root > 0 and n > root:
            depth, n = depth + 1, -(-n // c)
        levels = [(k, v, keep)]  # level 0, the keys; then the landmarks, level by level
        while len(levels) <= depth:
            levels.append(self.chunk_means(*levels[-1], c))
        # the top level: softmax over all its landmarks, and its best
        lk, lv, kept = levels[-1]
        ls = ((q / math.sqrt(dh)) @ lk.transpose(-1, -2)).masked_fill((kept == 0)[:, None, None, :], -1e9)
        compressed = torch.softmax(ls, -1) @ lv
        chosen = self.best(ls, (kept > 0)[:, None, None, :].expand_as(ls), top if depth == 1 else beam)
        # each level below: the children of the chunks chosen above, read and chosen among
        for level in range(depth - 1, -1, -1):
            lk, lv, kept = levels[level]
            chunk_of = torch.arange(lk.shape[2], device=k.device) // c
            allowed = chosen[..., chunk_of] & (kept > 0)[:, None, None, :]
            if level == 0:
                selected = self.softmax_part(q, k, v, allowed)
                break
            compressed = compressed + self.softmax_part(q, lk, lv, allowed)
            chosen = self.best((q / math.sqrt(dh)) @ lk.transpose(-1, -2), allowed, top if level == 1 else beam)
        compressed = compressed / (len(levels) - 1)
        g = torch.sigmoid(self.route_gate(x)).transpose(1, 2)[..., None]  # (B, H, N, 1)
        return g * selected + (1.0 - g) * compressed

    # ---- the linear part
    def features(self, x, role):
        fmap = self.fmap
        if fmap == "elu1":
            return F.elu(x) + 1.0
        if fmap == "relu":
            return F.relu(x)
        if fmap == "identity":
            return x
        if fmap == "exp":
            return torch.exp(x - x.amax(-1, keepdim=True))
        if fmap == "hedgehog":
            p = torch.einsum("bhnd,hed->bhne", x, getattr(self, f"hedgehog_{role}"))
            return torch.cat([torch.softmax(p, -1), torch.softmax(-p, -1)], -1)
        if fmap == "taylor":
            r = self.cfg["taylor_dim"]
            u = self.taylor_proj(x) / r ** 0.25
            u = torch.cat([u, torch.ones_like(u[..., :1])], -1)
            return u[..., self.taylor_idx].prod(-1) * self.taylor_scale.to(u.dtype)
        if fmap == "favor":
            w = self.favor_projection.to(x.dtype)
            xs = x / x.shape[-1] ** 0.25
            z = xs @ w.T - (xs * xs).sum(-1, keepdim=True) / 2
            # stabilisers: a query's own max; a head's keys' max, except in causal
            # self-attention (a decoded token sees the values training saw)
            if role == "q":
                z = z - z.amax(-1, keepdim=True)
            elif not self.causal:
                z = z - z.amax((-2, -1), keepdim=True)
            return torch.exp(z) / math.sqrt(w.shape[0])
        raise ValueError(f"tarn config: feature map {fmap!r} is not known to this file")

    def linear_part(self, q, k, v, qpos, kpos, kmask, decayed=True):
        a = self.features(q, "q") @ self.features(k, "k").transpose(-1, -2)
        a = a * self.visible(qpos, kpos, 0, kmask)
        gamma = self.cfg.get("align_decay", 0.0) if decayed else 0.0
        if self.cross and self.kind == "linear" and gamma > 0:  # aligned cross-attention, head h decays |i - j|
            decays = [1.0] + [max(1e-3, gamma ** (2 ** (h - 1))) for h in range(1, self.heads)]
            dist = (qpos[:, None] - kpos[None, :]).abs().to(a.dtype)
            a = a * torch.stack([torch.pow(torch.tensor(c, dtype=a.dtype), dist) for c in decays])
        return (a @ v) / (a.sum(-1, keepdim=True) + self.cfg["eps"])

    # ---- the delta rule part, (B, H, N, dh) before out_proj
    def delta_part(self, x, m, qp, kp, vp, xmask, mmask, cache):
        blk, erase = self.delta, self.glob == "delta"
        if self.cross:
            if cache is None or "delta_state" not in cache:
                k = unit(self.split(blk.conv(kp, blk.k_conv)))
                v = self.split(blk.conv(vp, blk.v_conv))
                beta, alpha = blk.beta_alpha(m, mmask)
                state = delta_scan(k, v, beta, alpha, erase)[1]
                if cache is not None:
                    cache["delta_state"] = state
            else:
                state = cache["delta_state"]
            o = unit(self.split(qp)) @ state  # queries read the finished state unconvolved
            return self.split(blk.finish(o, x))
        tails = cache.get("delta_tails") if cache is not None else None
        taps = blk.k_conv.shape[0]
        q = unit(self.split(blk.conv(qp, blk.q_conv, tails and tails[0])))
        k = unit(self.split(blk.conv(kp, blk.k_conv, tails and tails[1])))
        v = self.split(blk.conv(vp, blk.v_conv, tails and tails[2]))
        beta, alpha = blk.beta_alpha(m, mmask)
        state = cache.get("delta_state") if cache is not None else None
        o, state = delta_scan(k, v, beta, alpha, erase, q, state)
        if not self.causal:  # the encoder: a reverse scan over the same q, k, v, beta, alpha, summed
            rev = lambda z: z.flip(2)
            o = o + rev(delta_scan(rev(k), rev(v), rev(beta), rev(alpha), erase, rev(q))[0])
        if cache is not None:
            def last_inputs(new, old):  # the conv_size - 1 projected rows the next token's taps reach
                if taps == 1:
                    return new[:, :0]
                rows = torch.cat([old, new], 1) if old is not None else F.pad(new, (0, 0, taps - 1, 0))
                return rows[:, -(taps - 1):]
            cache["delta_tails"] = [last_inputs(p, tails[i] if tails else None) for i, p in enumerate((qp, kp, vp))]
            cache["delta_state"] = state
        return self.split(blk.finish(o, x))

    def forward(self, x, m, xmask=None, mmask=None, qstart=0, cache=None):
        """cache: None (whole sequences), or a dict this module keeps between decoding steps
        (x then holds the new rows only, from position qstart)."""
        dev = x.device
        qpos = torch.arange(qstart, qstart + x.shape[1], device=dev)
        qp = self.q_proj(x)
        if self.cross:
            if cache is not None and "k" in cache:
                kp, vp = cache["k"], cache["v"]
            else:
                kp, vp = self.k_proj(m), self.v_proj(m)
                if cache is not None:
                    cache["k"], cache["v"] = kp, vp
            kmask = mmask
        else:
            kp, vp = self.k_proj(m), self.v_proj(m)
            kmask = mmask
        if self.kind in ("delta", "gated"):
            return self.out_proj(self.merge(self.delta_part(x, m, qp, kp, vp, xmask, mmask, cache)))
        q = self.split(qp)
        if self.kind == "routed":
            return self.out_proj(self.merge(self.routed_part(x, q, self.split(kp), self.split(vp), kmask)))
        if self.kind == "softmax" or self.kind == "hybrid":
            if cache is not None and not self.cross:  # self-attention keeps every key and value
                if "k" in cache:
                    kp_all, vp_all = torch.cat([cache["k"], kp], 1), torch.cat([cache["v"], vp], 1)
                else:
                    kp_all, vp_all = kp, vp
                cache["k"], cache["v"] = kp_all, vp_all
            else:
                kp_all, vp_all = kp, vp
            kpos = torch.arange(kp_all.shape[1], device=dev)
            kmask_all = kmask if (kmask is None or kmask.shape[1] == kp_all.shape[1]) else None
            window = self.cfg.get("window", 0) if self.kind == "hybrid" else 0
            local = self.softmax_part(q, self.split(kp_all), self.split(vp_all),
                                      self.visible(qpos, kpos, window, kmask_all))
            if self.kind == "softmax":
                return self.out_proj(self.merge(local))
        k, v = self.split(kp), self.split(vp)
        if self.glob == "linear":
            if cache is not None and not self.cross:  # the recurrent state: S = sum phi(k) v^T, z = sum phi(k)
                fk = self.features(k, "k")
                if xmask is not None:
                    fk = fk * xmask[:, None, :, None]
                s_new = cache.get("S", 0) + fk.transpose(-1, -2) @ v
                z_new = cache.get("z", 0) + fk.sum(2)
                if x.shape[1] != 1:  # a whole prefix: read it causally, then keep the state
                    glob = self.linear_part(q, k, v, qpos, qpos, xmask)
                else:
                    fq = self.features(q, "q")
                    glob = (fq @ s_new) / ((fq * z_new[:, :, None, :]).sum(-1, keepdim=True) + self.cfg["eps"])
                cache["S"], cache["z"] = s_new, z_new
            else:
                kpos = torch.arange(k.shape[2], device=dev)
                glob = self.linear_part(q, k, v, qpos, kpos, kmask)
                if hasattr(self, "align_gate"):  # g aligned + (1 - g) plain, per head and position
                    plain = self.linear_part(q, k, v, qpos, kpos, kmask, decayed=False)
                    g = torch.sigmoid(self.align_gate(x)).transpose(1, 2)[..., None]  # (B, H, N, 1)
                    glob = plain + g * (glob - plain)
        else:
            glob = self.delta_part(x, m, qp, kp, vp, xmask, mmask, cache)
        if self.kind == "linear":
            return self.out_proj(self.merge(glob))
        g = torch.sigmoid(self.hybrid_gate(x)).transpose(1, 2)[..., None]  # (B, H, N, 1)
        return self.out_proj(self.merge(g * local + (1.0 - g) * glob))


class Layer(nn.Module):
    def __init__(self, d, ffn, heads, self_cfg, cross_cfg, decoder, eps):
        super().__init__()
        self.self_attn = TarnAttention(self_cfg, d, heads, causal=decoder, cross=False)
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=eps)
        if decoder:
            self.encoder_attn = TarnAttention(cross_cfg, d, heads, causal=False, cross=True)
            self.encoder_attn_layer_norm = nn.LayerNorm(d, eps=eps)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.final_layer_norm = nn.LayerNorm(d, eps=eps)

    def forward(self, x, xmask, enc=None, emask=None, qstart=0, cache=None):
        x = self.self_attn_layer_norm(x + self.self_attn(x, x, xmask, xmask, qstart, cache and cache["self"]))
        if enc is not None:
            x = self.encoder_attn_layer_norm(
                x + self.encoder_attn(x, enc, xmask, emask, qstart, cache and cache["cross"]))
        h = self.fc2(F.gelu(self.fc1(x)))
        return self.final_layer_norm(x + h)


class Stack(nn.Module):
    def __init__(self, config, decoder):
        super().__init__()
        t, d = config.tarn, config.d_model
        n = config.decoder_layers if decoder else config.encoder_layers
        heads = config.decoder_attention_heads if decoder else config.encoder_attention_heads
        ffn = config.decoder_ffn_dim if decoder else config.encoder_ffn_dim
        eps = t.get("layer_norm_eps", 1e-5)
        self_cfgs = layer_settings(t["decoder_self_attention" if decoder else "encoder_self_attention"], n)
        # routed's tree is as deep as a source of the encoder's learned positions needs
        cross_cfgs = ([dict(s, max_keys=config.max_position_embeddings) for s in layer_settings(t["cross_attention"], n)]
                      if decoder else [None] * n)
        self.embed_positions = nn.Embedding(config.max_position_embeddings + 2, d)
        self.layernorm_embedding = nn.LayerNorm(d, eps=eps)
        self.layers = nn.ModuleList(Layer(d, ffn, heads, s, c, decoder, eps) for s, c in zip(self_cfgs, cross_cfgs))
        self.scale = math.sqrt(d) if config.scale_embedding else 1.0

    def embed(self, shared, ids, start=0):
        pos = torch.arange(start, start + ids.shape[1], device=ids.device) + 2  # BART's offset
        return self.layernorm_embedding(shared(ids) * self.scale + self.embed_positions(pos))


class TarnEncoder(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = [model]  # not a submodule: no second copy of the weights' names

    def forward(self, input_ids=None, attention_mask=None, return_dict=True, **unused):
        m = self.model[0]
        mask = attention_mask.to(m.shared.weight.dtype) if attention_mask is not None else None
        x = m.encoder.embed(m.shared, input_ids)
        for layer in m.encoder.layers:
            x = layer(x, mask)
        return BaseModelOutput(last_hidden_state=x)


class TarnBartModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.encoder = Stack(config, decoder=False)
        self.decoder = Stack(config, decoder=True)


def _pick_rows(v, rows):
    """Every tensor in v (dicts and lists of them) at the batch rows `rows`."""
    if isinstance(v, torch.Tensor):
        return v.index_select(0, rows.to(v.device))
    if isinstance(v, list):
        return [_pick_rows(x, rows) for x in v]
    if isinstance(v, dict):
        return {k: _pick_rows(x, rows) for k, x in v.items()}
    return v


class TarnCache:
    """What decoding keeps between steps: the decoder position t, and per decoder layer a dict
    for its self-attention and one for its cross-attention, filled by TarnAttention.forward."""

    def __init__(self, layers):
        self.t = 0
        self.layers = [{"self": {}, "cross": {}} for _ in range(layers)]

    def reorder_cache(self, beam_idx):  # beam search keeps the hypotheses `beam_idx`
        self.layers = _pick_rows(self.layers, beam_idx)


class TarnBartForConditionalGeneration(PreTrainedModel, GenerationMixin):
    config_class = TarnBartConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _supports_cache_class = False
    # transformers 4.x reads delta.beta_proj.* as delta.bias_proj.* (DeltaBlock maps it back)
    _keys_to_ignore_on_load_missing = [r"delta\.beta_proj\."]
    _keys_to_ignore_on_load_unexpected = [r"delta\.bias_proj\."]

    def __init__(self, config):
        super().__init__(config)
        self.model = TarnBartModel(config)
        self.register_buffer("final_logits_bias", torch.zeros(1, config.vocab_size))
        self._encoder = TarnEncoder(self.model)
        self.post_init()

    def _init_weights(self, module):
        std = self.config.init_std
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(0.0, std)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(0.0, std)

    @classmethod
    def from_pretrained(cls, path, *args, **kwargs):
        model = super().from_pretrained(path, *args, **kwargs)
        favor = os.path.join(str(path), "tarn_favor_projections.safetensors")
        wanted = {n: b for n, b in model.named_buffers() if n.endswith("favor_projection")}
        if wanted:
            if not os.path.isfile(favor):
                raise OSError(f"{favor}: missing (FAVOR+'s projections of {', '.join(sorted(wanted))})")
            from safetensors.torch import load_file
            stored = load_file(favor)
            for name, buf in wanted.items():
                if name not in stored:
                    raise OSError(f"{favor}: no tensor {name}")
                buf.copy_(stored[name].to(buf.dtype))
        return model

    def get_encoder(self):
        return self._encoder

    def get_input_embeddings(self):
        return self.model.shared

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, encoder_outputs=None,
                past_key_values=None, labels=None, use_cache=None, return_dict=True, **unused):
        if encoder_outputs is None:
            encoder_outputs = self._encoder(input_ids, attention_mask)
        enc = encoder_outputs[0] if not isinstance(encoder_outputs, BaseModelOutput) else encoder_outputs.last_hidden_state
        emask = attention_mask.to(enc.dtype) if attention_mask is not None else None
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("decoder_input_ids or labels are needed")
            decoder_input_ids = labels.new_full(labels.shape, self.config.decoder_start_token_id)
            decoder_input_ids[:, 1:] = labels[:, :-1]
            decoder_input_ids = decoder_input_ids.masked_fill(decoder_input_ids == -100, self.config.pad_token_id)
        cache = past_key_values
        if use_cache and cache is None:
            cache = TarnCache(len(self.model.decoder.layers))
        start = cache.t if cache is not None else 0
        y = self.model.decoder.embed(self.model.shared, decoder_input_ids, start)
        for i, layer in enumerate(self.model.decoder.layers):
            y = layer(y, None, enc, emask, start, cache.layers[i] if cache is not None else None)
        if cache is not None:
            cache.t = start + decoder_input_ids.shape[1]
        logits = y @ self.model.shared.weight.T + self.final_logits_bias
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                   ignore_index=-100)
        return Seq2SeqLMOutput(loss=loss, logits=logits, past_key_values=cache,
                               encoder_last_hidden_state=enc)

    def prepare_inputs_for_generation(self, decoder_input_ids, past_key_values=None, attention_mask=None,
                                      encoder_outputs=None, use_cache=None, **unused):
        if past_key_values is not None:
            decoder_input_ids = decoder_input_ids[:, past_key_values.t:]
        return {"decoder_input_ids": decoder_input_ids, "past_key_values": past_key_values,
                "encoder_outputs": encoder_outputs, "attention_mask": attention_mask, "use_cache": True}

    @staticmethod
    def _reorder_cache(cache, beam_idx):
        cache.reorder_cache(beam_idx)
        return cache
