"""Loop nests for the bound constructs: reductions, scans, collectives.

A reduction is a loop (or a nest, one loop per index) with an accumulator,
placed in the block its hoisting depth chose. *Interchanged* reductions run
outside the statement's innermost loop: for a tile of the innermost index,
an array of accumulators is updated in an inner ``omp simd`` loop for each step
of the reduction, which turns a column-wise gather (embedding bags, matmul)
into contiguous vector work. Collectives fill a per-thread row buffer, then sort
it (stable merge sort) or select from it (top-k by insertion), once per row.
"""
from __future__ import annotations

from dataclasses import dataclass

from kdsl import ir

from kdsl.backends.c.code import Block, Loop
from kdsl.backends.c.emit import CTYPE, C, Var, as_float, kind_of
from kdsl.backends.c.plan import binders, free_names
from kdsl.backends.lower.rewrite import substitute


@dataclass(frozen=True)
class Acc:
    ctype: str
    init: str
    omp: str | None  # omp simd reduction operator, None when not expressible
    kind: str        # kind of the finished value


def acc_spec(op: str, body_kind: str, float_acc: str) -> Acc:
    f = body_kind == "f"
    if op in ("sum", "mean"):
        if op == "mean" or f:
            return Acc(float_acc, "0", "+", "f")
        return Acc("uint64_t", "0", "+", "i")
    if op == "prod":
        return Acc(float_acc, "1", "*", "f") if f else Acc("uint64_t", "1", "*", "i")
    if op in ("max", "argmax"):
        init = "(-INFINITY)" if f else "INT64_MIN"
    else:
        init = "INFINITY" if f else "INT64_MAX"
    ctype = "float" if f else "int64_t"
    if op.startswith("arg"):
        return Acc(ctype, init, None, "i")
    return Acc(ctype, init, op, "f" if f else "i")


# elements of a cascade's block: a float partial of 1024 terms (spread over the vector
# lanes) keeps its rounding error near a few ulp, and the total of the partials is a
# double, one add a block, so a sum of n terms errs like one of 1024 (a serial float sum
# of 131,072 squares erred by 1e-5 of its value: a group norm's outputs near zero then
# missed rtol 1e-4; float partials of 1024 added in float still erred by 1e-5 on a
# million equal terms, whose roundings all lean one way)
CASCADE = 1024


def cascade(em, loop: Loop, acc: str, part: str) -> Loop:
    """``loop`` (its body adding into ``part``) in blocks of ``CASCADE`` iterations, each
    block's ``part`` added into ``acc``: the loop over the blocks, to place where ``loop``
    was."""
    blocks = Loop(em.fresh("b"), loop.lo, loop.hi, step=str(CASCADE), vector=False)
    blocks.body.main.append(f"float {part} = 0;")
    loop.lo, loop.hi = blocks.var, f"kd_min64({blocks.var} + {CASCADE}, {loop.hi})"
    blocks.body.main.append(loop)
    blocks.body.main.append(f"{acc} += {part};")
    return blocks


# steps of a tiled sum's outermost loop a partial tile takes (each lane's partial: this
# many terms, times the inner loops' steps). 262,144 equal terms down 16 columns: 2.5e-3
# off in one float partial, 2.4e-6 in blocks of 256, 6e-7 of 64; a block costs two passes
# over the tile, 2 / TILE_BLOCK of its adds
TILE_BLOCK = 128


def tile_blocks(em, loop: Loop, acc: str, part: str, tn: str, size: int) -> Loop:
    """``loop`` (adding into the tile ``part``) in blocks of ``TILE_BLOCK`` steps, each
    block's partial tile added into the tile ``acc``: the loop over the blocks."""
    blocks = Loop(em.fresh("b"), loop.lo, loop.hi, step=str(TILE_BLOCK), vector=False)
    zero, add = Loop(em.fresh("dd"), "0", tn), Loop(em.fresh("dd"), "0", tn)
    zero.body.main.append(f"{part}[{zero.var}] = 0;")
    add.body.main.append(f"{acc}[{add.var}] += {part}[{add.var}];")
    loop.lo, loop.hi = blocks.var, f"kd_min64({blocks.var} + {TILE_BLOCK}, {loop.hi})"
    blocks.body.main += [f"float {part}[{size}];", zero, loop, add]
    return blocks


def update(op: str, acc: str, v: C, tmp: str, spec: Acc, idx: str = "", index: str = "") -> str:
    """C statements folding value ``v`` into accumulator ``acc``."""
    val = f"({spec.ctype})({v.text})"
    if op in ("sum", "mean"):
        return f"{acc} += {val};"
    if op == "prod":
        return f"{acc} *= {val};"
    cmp = ">" if op in ("max", "argmax") else "<"
    line = f"const {spec.ctype} {tmp} = {val}; "
    if op.startswith("arg"):
        return line + f"if ({tmp} {cmp} {acc}) {{ {acc} = {tmp}; {idx} = {index}; }}"
    return line + f"{acc} = {tmp} {cmp} {acc} ? {tmp} : {acc};"


def finish(op: str, acc: str, spec: Acc, idx: str = "", count: str = "") -> str:
    if op == "mean":
        return f"({acc} / ({spec.ctype})({count}))"
    if op.startswith("arg"):
        return idx
    if spec.ctype == "uint64_t":
        return f"((int64_t)({acc}))"
    return acc


class Nests:
    """Mixed into the kernel writer; uses its emitter ``self.em`` and options ``self.opt``."""

    def body_kind(self, e: ir.Expr, scope: dict) -> str:
        return kind_of(self.op, self.dtype, e, set(scope))

    def reduced_kind(self, e: ir.Reduce, scope: dict) -> str:
        """The kind of a reduction's body (an argmax of floats reduces floats)."""
        return kind_of(self.op, self.dtype, e.body, set(scope) | set(binders(e)))

    def reduce(self, e: ir.Reduce, scope: dict, stack: list) -> C:
        em = self.em
        spec = acc_spec(e.op, self.reduced_kind(e, scope), self.opt.acc)
        acc, idx, cnt = em.fresh("acc"), em.fresh("ai"), em.fresh("cnt")
        loops, inner, cur = [], dict(scope), list(stack)
        for r in e.indices:
            lo = em.emit(r.lo, inner, cur, True)
            hi = em.emit(r.hi, inner, cur, True)
            loop = Loop(em.fresh("r"), lo.text, hi.text)
            loops.append(loop)
            inner[r.name] = Var(loop.var, len(cur))
            cur = cur + [loop.body]
        v = em.emit(e.body, inner, cur)
        last = loops[-1]
        simd = bool(spec.omp) and self.opt.reduce_vec == "simd"
        # a float sum runs in blocks (a cascade): each block of the innermost loop into a
        # partial of its own, added to the total after it
        part = em.fresh("part") if simd and e.op in ("sum", "mean") and \
            spec.ctype == "float" else None
        last.body.main.append(update(e.op, part or acc, v, em.fresh("v"), spec, idx,
                                     last.var))
        if e.op == "mean":
            last.body.main.append(f"{cnt} += 1;")
        placed = cascade(em, last, acc, part) if part else last
        for outer, nested in zip(loops[:-1], loops[1:-1] + [placed]):
            outer.body.main.append(nested)
            outer.vector = False
        if simd:
            last.reductions = [(spec.omp, part or acc)] + \
                ([("+", cnt)] if e.op == "mean" else [])
        else:
            last.vector = False
        blk: Block = stack[-1]
        blk.pre.append(f"{'double' if part else spec.ctype} {acc} = {spec.init};")
        if e.op.startswith("arg"):
            blk.pre.append(f"int64_t {idx} = {loops[0].lo};")
        if e.op == "mean":
            blk.pre.append(f"int64_t {cnt} = 0;")
        blk.pre.append(loops[0] if len(loops) > 1 else placed)
        done = finish(e.op, acc, spec, idx, cnt)
        return C(f"((float){done})" if part else done, spec.kind)

    def interchange(self, sp, reds: list, scope: dict, stack: list) -> None:
        """The statement's innermost loop, tiled, with ``reds`` computed per tile outside it.

        Full tiles run loops of a constant trip count (their accumulators can stay in
        registers); one remainder tile after them covers the rest."""
        d = sp.inner[-1]
        ext = self.extent(sp.st, d)
        size = self.opt.tile
        full = Loop(self.em.fresh("t"), "0", f"{ext} - {size} + 1", step=str(size), vector=False)
        stack[-1].main.append(full)
        self.tile(sp, reds, scope, stack + [full.body], full.var, str(size), d)
        rest = self.em.fresh("t")
        stack[-1].main.append(f"const int64_t {rest} = ({ext} / {size}) * {size};")
        tail = Loop(self.em.fresh("u"), "0", f"(({rest} < {ext}) ? 1 : 0)", vector=False)
        stack[-1].main.append(tail)
        tn = self.em.fresh("tn")
        tail.body.pre.append(f"const int64_t {tn} = {ext} - {rest};")
        self.tile(sp, reds, scope, stack + [tail.body], rest, tn, d)

    def tile(self, sp, reds: list, scope: dict, tstack: list, t0: str, tn: str, d: str) -> None:
        em, st, size = self.em, sp.st, self.opt.tile
        bt = tstack[-1]
        finals = []
        for red in reds:
            spec = acc_spec(red.op, self.reduced_kind(red, scope), self.opt.acc)
            acc, idx, cnt = em.fresh("va"), em.fresh("vi"), em.fresh("cnt")
            loops, inner, cur = [], dict(scope), list(tstack)
            for r in red.indices:
                lo = em.emit(r.lo, inner, cur, True)
                hi = em.emit(r.hi, inner, cur, True)
                loops.append(Loop(em.fresh("r"), lo.text, hi.text, vector=False))
                inner[r.name] = Var(loops[-1].var, len(cur))
                cur = cur + [loops[-1].body]
            # a float sum in blocks of its outermost loop, as ``cascade``: each lane's block
            # into a float partial, the partials into a double total
            part = em.fresh("vp") if red.op in ("sum", "mean") and spec.ctype == "float" \
                else None
            init = Loop(em.fresh("dd"), "0", tn)
            init.body.main.append(f"{acc}[{init.var}] = {spec.init};")
            bt.main.append(f"{'double' if part else spec.ctype} {acc}[{size}];")
            if red.op.startswith("arg"):
                bt.main.append(f"int64_t {idx}[{size}];")
                init.body.main.append(f"{idx}[{init.var}] = {loops[0].lo};")
            if red.op == "mean":
                bt.main.append(f"int64_t {cnt} = 0;")
            bt.main.append(init)
            ahead = self.prefetch(red, d, inner, cur, loops, t0)
            if ahead:
                # one prefetch per cache line, interleaved with the adds that read a line
                base, step = ahead
                chunk = Loop(em.fresh("q"), "0", tn, step=str(step), vector=False)
                chunk.body.main.append(f"__builtin_prefetch(&{base}[{chunk.var}], 0, 3);")
                whole = tn.isdigit() and int(tn) % step == 0  # a full tile: whole lines
                end = f"{chunk.var} + {step}" if whole else f"kd_min64({chunk.var} + {step}, {tn})"
                upd = Loop(em.fresh("dd"), chunk.var, end)
                chunk.body.main.append(upd)
                ustack, top = cur + [chunk.body, upd.body], chunk
            else:
                upd = Loop(em.fresh("dd"), "0", tn)
                ustack, top = cur + [upd.body], upd
            inner[d] = Var(f"({t0} + {upd.var})", len(ustack) - 1)
            v = em.emit(red.body, inner, ustack)
            upd.body.main.append(update(red.op, f"{part or acc}[{upd.var}]", v, em.fresh("v"),
                                        spec, f"{idx}[{upd.var}]", loops[-1].var))
            if red.op.startswith("arg"):
                upd.vector = False
            loops[-1].body.main.append(top)
            if red.op == "mean":
                loops[-1].body.main.append(f"{cnt} += 1;")
            for outer, nested in zip(loops, loops[1:]):
                outer.body.main.append(nested)
            bt.main.append(tile_blocks(em, loops[0], acc, part, tn, size) if part else loops[0])
            finals.append((red, acc, idx, cnt, spec))
        epi = Loop(em.fresh("dd"), "0", tn)
        escope = dict(scope)
        escope[d] = Var(f"({t0} + {epi.var})", len(tstack))
        self.overrides = {}
        for red, acc, idx, cnt, spec in finals:
            text = finish(red.op, f"{acc}[{epi.var}]", spec, f"{idx}[{epi.var}]", cnt)
            self.overrides[em.key(red, escope)] = C(text, spec.kind)
        v = em.emit(st.value, escope, tstack + [epi.body])
        self.overrides = {}
        epi.body.main.append(self.store(st, escope, v))
        bt.main.append(epi)

    def prefetch(self, red: ir.Reduce, d: str, scope: dict, stack: list, loops: list,
                 t0: str):
        """Where the row a gather reads ``opt.prefetch`` reduction steps ahead starts.

        Returns (pointer expression, elements per cache line), or None. The pointer is
        computed in the reduction loop's body, before the update loop."""
        dist = self.opt.prefetch
        if not dist or len(red.indices) != 1:
            return None
        r = red.indices[0].name
        for n in ir.walk(red.body):
            if not (isinstance(n, ir.Access) and self.plan.storage[n.tensor] in ("input", "global")):
                continue
            gathered = [s for s in n.subscripts[:-1] if isinstance(s, ir.Access)
                        and r in free_names(s)]
            last = n.subscripts[-1]
            if not gathered or not (isinstance(last, ir.Name) and last.name == d) or \
                    any(d in free_names(s) for s in n.subscripts[:-1]):
                continue
            # r + dist is not a bare index, so the read of the index tensor is clamped to
            # that tensor, not to this range: the next range's first rows get prefetched too.
            ahead = {r: ir.Binary("+", ir.Name(r), ir.Num(dist))}
            subs = [self.em.emit(substitute(s, ahead), scope, stack, True)
                    for s in n.subscripts[:-1]]
            shape = self.shape_c(n.tensor)
            rows = [f"kd_clamp({s.text}, {m})" for s, m in zip(subs, shape[:-1])]
            base = self.em.fresh("pf")
            ctype = "const " + CTYPE[self.dtype_of(n.tensor)]
            loops[-1].body.main.append(f"{ctype} *{base} = &{self.ptr(n.tensor)}"
                                       f"[{self.offset(n.tensor, rows + [t0], 0)}];")
            return base, max(1, 64 // self.itemsize(n.tensor))
        return None

    def scan(self, e: ir.Scan, scope: dict, stack: list) -> C:
        var: Var = scope[e.index]
        blk = stack[var.depth]
        key = self.em.key(e, scope, "scan")
        if key in blk.memo:
            return blk.memo[key]
        kind = self.body_kind(e.body, scope)
        acc = self.em.fresh("sc")
        v = self.em.emit(e.body, scope, stack)
        if e.op in ("cummax", "cummin"):
            # a running extreme; a NaN, once seen, stays (numpy's maximum.accumulate)
            ctype = self.opt.acc if kind == "f" else "int64_t"
            big = e.op == "cummax"
            init = ("-INFINITY" if big else "INFINITY") if kind == "f" else \
                ("INT64_MIN" if big else "INT64_MAX")
            nan = " || sv != sv" if kind == "f" else ""
            cmp = ">" if big else "<"
            stack[var.depth - 1].pre.append(f"{ctype} {acc} = {init};")
            stack[var.depth].pre.append(f"{{ const {ctype} sv = ({ctype})({v.text}); "
                                        f"if (sv {cmp} {acc}{nan}) {acc} = sv; }}")
        elif e.op == "logcumsumexp":
            # a running log-sum-exp: logaddexp(acc, v) = max + log1p(exp(-|acc - v|)); an
            # empty prefix is -inf (and stays so past -inf terms), a NaN stays
            ctype = self.opt.acc
            stack[var.depth - 1].pre.append(f"{ctype} {acc} = -INFINITY;")
            stack[var.depth].pre.append(
                f"{{ const {ctype} sv = ({ctype})({v.text}); "
                f"const {ctype} mx = sv > {acc} ? sv : {acc}; "
                f"const {ctype} d = sv == {acc} ? 0 : fabsf(sv - {acc}); "
                f"if (mx > -INFINITY) {acc} = mx + kd_log1p(kd_exp(-d)); "
                f"else if (sv != sv) {acc} = sv; }}")
            kind = "f"
        elif e.op == "cumdecay":  # y[j] = c * y[j - 1] + x[j]
            ctype = self.opt.acc
            stack[var.depth - 1].pre.append(f"{ctype} {acc} = 0;")
            stack[var.depth].pre.append(
                f"{acc} = ({ctype})({e.factor.value!r}) * {acc} + ({ctype})({v.text});")
            kind = "f"
        else:
            ctype = self.opt.acc if kind == "f" else "uint64_t"
            init = "0" if e.op == "cumsum" else "1"
            stack[var.depth - 1].pre.append(f"{ctype} {acc} = {init};")
            sym = "+" if e.op == "cumsum" else "*"
            stack[var.depth].pre.append(f"{acc} {sym}= ({ctype})({v.text});")
        self.loop_of[id(stack[var.depth])].vector = False
        out = C(acc if kind == "f" else f"((int64_t)({acc}))", "f" if kind == "f" else "i")
        blk.memo[key] = out
        return out

    def collective(self, e: ir.Collective, scope: dict, stack: list) -> C:
        family = "sort" if e.op in ("sort", "argsort") else "topk"
        canon = ir.Collective(family, e.index, e.k, e.body)
        d = self.em.depth(canon, scope)
        blk = stack[d]
        key = self.em.key(canon, scope, "collective")
        if key not in blk.memo:
            blk.memo[key] = self.fill(canon, scope, stack[:d + 1])
        keys, ids, kind = blk.memo[key]
        if family == "sort":
            out = e.index.name
        else:
            body = {n.name for n in ir.walk(e.body) if isinstance(n, ir.Name)}
            out = next(n for n in self.cur.st.indices if n not in body)
        pos = scope[out].text
        if e.op in ("sort", "topk"):
            return C(f"{keys}[{pos}]", kind)
        return C(f"{ids}[{pos}]", "i")

    def fill(self, e: ir.Collective, scope: dict, stack: list):
        em = self.em
        kind = self.body_kind(e, scope)
        ctype, tag = (("double", "f64") if self.wide else ("float", "f32")) if kind == "f" \
            else ("int64_t", "i64")
        self.need_sort(tag, ctype)
        size = self.dims_c(e.index.hi if e.op == "sort" else e.k)
        keys, ids = self.thread_buffer(ctype, size), self.thread_buffer("int64_t", size)
        lo = em.emit(e.index.lo, scope, stack, True)
        hi = em.emit(e.index.hi, scope, stack, True)
        loop = Loop(em.fresh("r"), lo.text, hi.text)
        inner = dict(scope)
        inner[e.index.name] = Var(loop.var, len(stack))
        v = em.emit(e.body, inner, stack + [loop.body])
        val = f"({ctype})({as_float(v) if kind == 'f' else v.text})"
        blk = stack[-1]
        if e.op == "sort":
            at = f"{loop.var} - {lo.text}"
            loop.body.main.append(f"{keys}[{at}] = {val}; {ids}[{at}] = {loop.var};")
            blk.pre.append(loop)
            tk, ti = self.thread_buffer(ctype, size), self.thread_buffer("int64_t", size)
            blk.pre.append(f"kd_sort_{tag}({keys}, {ids}, {tk}, {ti}, {hi.text} - {lo.text});")
        else:
            cnt, q = em.fresh("cnt"), em.fresh("q")
            loop.vector = False
            loop.body.main.append(f"kd_topk_push_{tag}({keys}, {ids}, &{cnt}, {size}, {val}, "
                                  f"{loop.var});")
            blk.pre.append(f"int64_t {cnt} = 0;")
            blk.pre.append(loop)
            blk.pre.append(f"for (int64_t {q} = {cnt}; {q} < {size}; ++{q}) "
                           f"{{ {keys}[{q}] = 0; {ids}[{q}] = {lo.text}; }}")
        return keys, ids, "f" if kind == "f" else "i"
