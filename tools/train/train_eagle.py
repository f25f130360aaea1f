"""Trains the EAGLE-1 draft head of pagedllm-tiny on the target's own features and
predictions, exports it, and measures its offline acceptance on the held-out split.

    scripts/python.sh tools/train/train_eagle.py --target models/pagedllm-tiny \
        --out build-train/eagle --export models/pagedllm-tiny-eagle

The target is the exported directory (bf16 weights, computed in fp32 / bf16 autocast),
frozen. Its features f_t are its final hidden states after model.norm, the input of
lm_head. EAGLE-1: the head's input at position t is fc(cat(embed(x_{t+1}), f_t)), one Llama
decoder layer without input_layernorm turns it into a prediction of f_{t+1}, and the
target's lm_head (shared, frozen) turns that into logits for x_{t+2}. Loss, as in EAGLE-1:
SmoothL1(pred, f_{t+1}) + 0.1 * cross-entropy between the target's next-token distribution
softmax(lm_head(f_{t+1})) and log_softmax(lm_head(pred)). Input features get EAGLE's
uniform noise (--noise). Features are computed on the fly over random windows of the
training split (same batch sampler and seed rules as train.py).

Offline acceptance (greedy chain drafting, as speculative decoding does it): for every
position t of every held-out window, the head drafts d_1..d_K from the true f_t and token
x_{t+1}, then from its own predicted features and drafted tokens; the target verifies the
draft in one forward (the drafted tokens appended to x_0..x_{t+1}); the accepted length is
the number of leading drafts equal to the target's greedy tokens.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, help="exported target directory (models/pagedllm-tiny)")
    ap.add_argument("--out", required=True, help="work directory: log.jsonl, ckpt.pt, acceptance.json")
    ap.add_argument("--export", default=None, help="write the EAGLE-1 directory here")
    ap.add_argument("--archive", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--clip", type=float, default=0.5)
    ap.add_argument("--noise", type=float, default=0.2, help="uniform feature noise of this width (EAGLE-1: 0.2)")
    ap.add_argument("--ce-weight", type=float, default=0.1)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--accept-k", type=int, default=5, help="longest draft chain measured")
    ap.add_argument("--accept-window", type=int, default=256)
    ap.add_argument("--accept-max-windows", type=int, default=0, help="0: every held-out window")
    ap.add_argument("--only-accept", action="store_true",
                    help="skip training: measure the head already exported at --export")
    return ap.parse_args(argv)


def eagle_losses(torch, target, head, x, args, noise_gen=None):
    """x: [B, T+1] tokens. Returns (loss, smooth_l1, ce, top1 accuracy vs the target's argmax)."""
    import torch.nn.functional as F
    with torch.no_grad():
        with common.autocast(torch, x.device, args.dtype):
            feats = target.hidden(x)  # f_0 .. f_T
        feats = feats.float()
        target_logits = target.lm_head(feats[:, 1:])  # distribution over x_{t+2}, t = 0..T-1
        target_p = torch.softmax(target_logits, dim=-1)
    inp = feats[:, :-1]
    if noise_gen is not None and args.noise > 0:
        inp = inp + (torch.rand(inp.shape, generator=noise_gen, device="cpu").to(inp.device) - 0.5) * args.noise
    emb = target.model.embed_tokens(x[:, 1:]).detach()  # embeddings of x_{t+1}
    pos = torch.arange(x.shape[1] - 1, device=x.device).unsqueeze(0).expand(x.shape[0], -1)
    with common.autocast(torch, x.device, args.dtype):
        pred = head(inp, emb, pos)
    pred = pred.float()
    smooth = F.smooth_l1_loss(pred, feats[:, 1:])
    logp = F.log_softmax(target.lm_head(pred), dim=-1)
    ce = -(target_p * logp).sum(-1).mean()
    acc = (logp.argmax(-1) == target_logits.argmax(-1)).float().mean()
    return smooth + args.ce_weight * ce, smooth, ce, acc


def chain_masks(torch, L, K, device):
    """Attention masks and positions for drafting K steps from every start t in one pass.

    Head sequence: base entries (s=1, t) for t = 0..L-2 -- input (f_t, x_{t+1}) at position t --
    then for s = 2..K the chain entries (s, t) -- input (pred f, d_{s-1}) at position t+s-1.
    Entry (s, t) sees base entries t' <= t and its own chain entries (s', t), 2 <= s' <= s.

    Target sequence: base tokens x_0..x_{L-1} at positions 0..L-1, then for j = 1..K-1 the
    drafted token d_j of start t (t = 0..L-2) at position t+1+j. It sees base tokens <= t+1 and
    its own chain's d_1..d_j."""
    n = L - 1
    t = torch.arange(n, device=device)
    # head
    hs = torch.arange(K, device=device).repeat_interleave(n)  # 0-based step index
    ht = t.repeat(K)
    hmask = (ht[None, :] <= ht[:, None]) & (hs[None, :] == 0)
    hmask |= (hs[None, :] >= 1) & (hs[None, :] <= hs[:, None]) & (ht[None, :] == ht[:, None])
    hpos = ht + hs
    # target
    bt = torch.arange(L, device=device)
    cs = torch.arange(1, K, device=device).repeat_interleave(n)  # j = 1..K-1
    ct = t.repeat(K - 1)
    q_is_base = torch.cat([torch.ones(L, dtype=torch.bool, device=device), torch.zeros(len(cs), dtype=torch.bool, device=device)])
    qt = torch.cat([bt, ct])  # for base: its position; for chain: start t
    qj = torch.cat([torch.zeros(L, dtype=torch.long, device=device), cs])
    tmask = torch.zeros(len(qt), len(qt), dtype=torch.bool, device=device)
    # base query -> base keys, causal
    tmask[:L, :L] = bt[None, :] <= bt[:, None]
    # chain query (j, t) -> base keys <= t+1, and chain keys (j', t) with j' <= j
    tmask[L:, :L] = bt[None, :] <= (ct[:, None] + 1)
    tmask[L:, L:] = (ct[None, :] == ct[:, None]) & (cs[None, :] <= cs[:, None])
    tpos = torch.cat([bt, ct + 1 + cs])
    del q_is_base, qt, qj
    return hmask, hpos, tmask, tpos


def offline_acceptance(torch, target, head, stream, args, log=print):
    """Greedy chain drafting over held-out windows; see the module docstring."""
    L, K = args.accept_window, args.accept_k
    n = L - 1
    nwin = (len(stream)) // L
    if args.accept_max_windows:
        nwin = min(nwin, args.accept_max_windows)
    hmask, hpos, tmask, tpos = chain_masks(torch, L, K, "cpu")
    accepted_hist = [0] * (K + 1)  # accepted length 0..K
    pos_tries = [0] * K
    pos_accepts = [0] * K
    t0 = time.time()
    with torch.no_grad():
        for w in range(nwin):
            x = stream[w * L:(w + 1) * L].unsqueeze(0)  # x_0 .. x_{L-1}
            feats = target.hidden(x)[0]  # [L, h]
            greedy_base = target.lm_head(feats).argmax(-1)  # target's greedy token after x_0..x_i
            emb = target.model.embed_tokens
            # head step 1 for all t at once; then steps 2..K over the growing chain sequence
            inp_f = [feats[:n]]
            inp_tok = [x[0, 1:]]
            drafts = []
            for s in range(K):
                m = (s + 1) * n
                f_in = torch.cat(inp_f)[None]
                e_in = emb(torch.cat(inp_tok))[None]
                out = head(f_in, e_in, hpos[:m][None], hmask[:m, :m])[0]
                pred = out[s * n:(s + 1) * n]  # predicted f for step s+1 of every start t
                d = target.lm_head(pred).argmax(-1)
                drafts.append(d)
                inp_f.append(pred)
                inp_tok.append(d)
            # target verification: x_0..x_{L-1} + d_1..d_{K-1} of every chain
            toks = torch.cat([x[0]] + drafts[:K - 1])[None]
            logits = target(toks, tpos[None], tmask)[0]
            g = [greedy_base[1:]]  # G_1(t) = greedy after x_0..x_{t+1}, t = 0..L-2
            for j in range(1, K):
                g.append(logits[L + (j - 1) * n:L + j * n].argmax(-1))  # G_{j+1}(t)
            alive = torch.ones(n, dtype=torch.bool)
            length = torch.zeros(n, dtype=torch.long)
            for j in range(K):
                ok = drafts[j] == g[j]
                pos_tries[j] += int(alive.sum())
                pos_accepts[j] += int((alive & ok).sum())
                alive &= ok
                length += alive.long()
            for v in length.tolist():
                accepted_hist[v] += 1
            if (w + 1) % 50 == 0:
                log(f"  acceptance: {w + 1}/{nwin} windows, {time.time() - t0:.0f} s")
    total = sum(accepted_hist)
    res = {"windows": nwin, "window_len": L, "starts": total, "k": K,
           "accepted_length_histogram": accepted_hist,
           "per_position": [], "by_k": []}
    for j in range(K):
        res["per_position"].append({
            "position": j + 1,
            "conditional_acceptance": round(pos_accepts[j] / max(1, pos_tries[j]), 4),
            "unconditional_acceptance": round(pos_accepts[j] / max(1, total), 4)})
    for k in range(1, K + 1):
        mean_acc = sum(min(a, k) * c for a, c in enumerate(accepted_hist)) / total
        res["by_k"].append({"k": k, "mean_accepted": round(mean_acc, 4),
                            "tokens_per_target_forward": round(1 + mean_acc, 4)})
    res["seconds"] = round(time.time() - t0, 1)
    return res


def main(argv=None):
    args = parse_args(argv)
    torch = common.set_threads(args.threads)
    import data
    import export_hf
    import hf_load
    import model as M

    os.makedirs(args.out, exist_ok=True)
    log = common.JsonLog(os.path.join(args.out, "log.jsonl"))
    device = torch.device(args.device)
    target, cfg = hf_load.load_target(args.target, device)
    for p in target.parameters():
        p.requires_grad_(False)
    archive = args.archive or data.corpus.DEFAULT_ARCHIVE
    train_ids, held_ids, info = data.token_streams(os.path.join(args.target, "tokenizer.json"), args.out, archive)
    train_stream = torch.from_numpy(train_ids).long()
    held_stream = torch.from_numpy(held_ids).long()

    if not args.only_accept:
        torch.manual_seed(args.seed)
        head = M.EagleHead(cfg).to(device)
        opt = torch.optim.AdamW(head.parameters(), lr=args.lr, betas=(0.9, 0.95),
                                weight_decay=args.weight_decay)
        step, train_seconds = 0, 0.0
        ckpt_path = os.path.join(args.out, "ckpt.pt")
        if os.path.exists(ckpt_path):
            ck = torch.load(ckpt_path, map_location=device)
            head.load_state_dict(ck["head"])
            opt.load_state_dict(ck["opt"])
            step, train_seconds = ck["step"], ck["train_seconds"]
            log(event="resume", step=step)
        else:
            log(event="start", args=vars(args), params=M.count_params(head), data=info,
                torch=torch.__version__)
        import train as T
        acc_sum, l_sum, s_sum, c_sum, n_sum = 0.0, 0.0, 0.0, 0.0, 0
        while step < args.steps:
            t0 = time.time()
            lr = common.lr_at(step, args)
            for group in opt.param_groups:
                group["lr"] = lr
            x = T.get_batch(torch, train_stream, step, args.seq_len, args.batch_tokens, args.seed).to(device)
            noise_gen = torch.Generator().manual_seed(args.seed * 7919 + step)
            loss, smooth, ce, acc = eagle_losses(torch, target, head, x, args, noise_gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), args.clip)
            opt.step()
            step += 1
            train_seconds += time.time() - t0
            l_sum += loss.item(); s_sum += smooth.item(); c_sum += ce.item(); acc_sum += acc.item(); n_sum += 1
            if step % args.log_every == 0 or step == args.steps:
                log(step=step, loss=round(l_sum / n_sum, 5), smooth_l1=round(s_sum / n_sum, 5),
                    ce=round(c_sum / n_sum, 5), top1=round(acc_sum / n_sum, 4), lr=lr,
                    train_seconds=round(train_seconds, 1))
                acc_sum, l_sum, s_sum, c_sum, n_sum = 0.0, 0.0, 0.0, 0.0, 0
            if step % args.eval_every == 0 or step == args.steps:
                head.eval()
                tot = [0.0, 0.0, 0.0, 0.0]
                nb = 0
                with torch.no_grad():
                    L = args.seq_len
                    nwin = (len(held_stream) - 1) // L
                    for i in range(0, nwin, 16):
                        xe = torch.stack([held_stream[j * L:j * L + L + 1] for j in range(i, min(nwin, i + 16))]).to(device)
                        r = eagle_losses(torch, target, head, xe, args)
                        for k in range(4):
                            tot[k] += r[k].item()
                        nb += 1
                head.train()
                log(step=step, eval_loss=round(tot[0] / nb, 5), eval_smooth_l1=round(tot[1] / nb, 5),
                    eval_ce=round(tot[2] / nb, 5), eval_top1=round(tot[3] / nb, 4))
            if step % args.ckpt_every == 0 or step == args.steps:
                tmp = ckpt_path + ".tmp"
                torch.save({"head": head.state_dict(), "opt": opt.state_dict(), "step": step,
                            "train_seconds": train_seconds}, tmp)
                os.replace(tmp, ckpt_path)
        log(event="done", step=step, train_seconds=round(train_seconds, 1))
        if args.export:
            export_hf.export_eagle(torch, {k: v.cpu() for k, v in head.state_dict().items()},
                                   hf_cfg_dict(cfg), os.path.basename(os.path.normpath(args.target)),
                                   args.export, {})
    if not args.export:
        return 0
    # measure the exported (bf16) head, in fp32, on the CPU
    head, _ = hf_load.load_eagle(args.export)
    target_cpu, _ = hf_load.load_target(args.target)
    res = offline_acceptance(torch, target_cpu, head, held_stream, args,
                             log=lambda m: print(m, flush=True))
    res["heldout_tokens"] = info["heldout_tokens"]
    with open(os.path.join(args.out, "acceptance.json"), "w") as f:
        json.dump(res, f, indent=1)
    log(event="acceptance", **{k: res[k] for k in ("by_k", "per_position", "starts", "seconds")})
    return 0


def hf_cfg_dict(cfg):
    return cfg.to_dict()


if __name__ == "__main__":
    sys.exit(main())
