"""Torch-free attribution of profiler events to layer, sublayer, category and phase.

The reading half of measured attribution: `bertscope.measure.attribution` holds the torch
hooks that name the scopes and imports this module, so the profiler and the trace reader
attribute events with the same code, and the trace reader runs without torch.

The `Attributor` works on any objects that look like torch's `FunctionEvent`: `name`,
`cpu_children` (time order), `sequence_nr`, `input_shapes`, `cpu_time_total`,
`device_time_total` (us) and `flops`; the trace reader builds such nodes from trace JSON.

The walk is iterative, whatever the nesting (a trace of ops nested 1,200 deep is read like
any other): an event with children to walk is a step, a generator that yields the walk of a
child (another such generator) and receives its result, and `Attributor.walk` runs them
from one explicit stack (`_run`), so Python's recursion limit never applies; an op (most
events) is attributed at once, without a generator. The helpers that look below an event
(`_seqs`, `_flops`, `_copies`, `_node_ops`) use explicit stacks too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from bertscope.errors import parse_enum
from bertscope.optable import Op
from bertscope.taxonomy import Category, Classifier, Phase, Sublayer
from bertscope.trace.gemm_ops import gemm_shape  # the one GEMM shape registry, re-exported
from bertscope.trace.modules import ModuleMap, builtin_modules, module_class

SCOPE = "bertscope::"
PHASE = "bertscope.phase::"
ITER = "bertscope.iter::"
ATTN_CORE = "attn_core"
"""Scope marker for modules that run the whole attention core (Hugging Face's self-attention):
their ops are split into score / softmax / context by category and order."""
_EVAL = "autograd::engine::evaluate_function: "
_LINEAR_BWD = ("AddmmBackward0", "MmBackward0", "LinearBackward0")
_WEIGHT_GRAD_NODES = ("EmbeddingBackward0", "EmbeddingBagBackward0",
                      "torch::autograd::AccumulateGrad")
_NODE_PHASES: tuple[tuple[str, Phase], ...] = (
    ("SplitLookupFunction_", Phase.BACKWARD_WEIGHT),
    ("NativeLayerNormBackward", Phase.BACKWARD), ("ConvolutionBackward", Phase.BACKWARD),
    ("CudnnConvolutionBackward", Phase.BACKWARD), ("MkldnnConvolutionBackward", Phase.BACKWARD),
    ("SlowConv2DBackward", Phase.BACKWARD), ("ConvDepthwise2DBackward", Phase.BACKWARD),
    ("NativeBatchNormBackward", Phase.BACKWARD), ("CudnnBatchNormBackward", Phase.BACKWARD),
    ("MiopenBatchNormBackward", Phase.BACKWARD), ("NativeGroupNormBackward", Phase.BACKWARD),
    ("CompiledFunctionBackward", Phase.BACKWARD))
"""Backward nodes (by name prefix) whose one op computes the data and weight gradients
together (phase backward; on a GPU the kernel names split it: `wgrad` kernels; a
torch.compile backward graph computes both in its kernels), or only the weight gradient
(FBGEMM's table-batched embedding backward, with its fused optimizer)."""
_TRANSPARENT = frozenset({"DistributedDataParallel.forward"})
"""Wrapper scopes walked through like an iteration scope (DDP's forward holds the model's)."""
_GRAD_SYNC = ("torch::distributed::reducer::", "torch.distributed.ddp.reducer::")
"""DDP's own gradient-bucket work (copy into the bucket scaled by 1/world, copy back to
.grad): phase communication, with the category of the work (elementwise, data movement)."""


class Statistic(StrEnum):
    """How a row's time per iteration is taken over the measured iterations."""

    MEAN = "mean"
    """Total time over the iterations, divided by their number."""
    MEDIAN = "median"
    """The median of the row's time in each iteration: one slow iteration (a page-fault
    storm, another process on a shared machine) does not move it."""
    MIN = "min"
    """The least of the row's time in each iteration. On a shared machine, noise only adds
    time (another process, a steal of the virtual CPU), so the minimum is the estimate it
    moves least (Python's timeit docs; Chen & Revels, "Robust benchmarking in noisy
    environments", arXiv:1608.04295). A row's least is over the iterations that ran it;
    the least over rounds is the least over all their iterations, so rounds combine
    exactly."""

    def of_row(self, per_iteration: Sequence[float]) -> float:
        """A row's time from its time in each iteration (0 where it did not run): `of`
        them, except that the minimum is the least over the iterations that ran it."""
        if self is Statistic.MIN:
            return min((t for t in per_iteration if t > 0), default=0.0)
        return self.of(per_iteration)

    def of(self, values: Sequence[float]) -> float:
        """This statistic of `values` (one per iteration; at least one)."""
        if self is Statistic.MEDIAN:
            import statistics  # only here: it loads decimal, fractions and random

            return float(statistics.median(values))
        if self is Statistic.MIN:
            return float(min(values))
        return float(sum(values) / len(values))


def between_ops(iteration_times: Sequence[float], row_times: Sequence[Sequence[float]]
                ) -> list[float]:
    """Per iteration: its time minus its rows' (`row_times`: per row, per iteration), the
    framework's time between and around ops (Python, the autograd engine, the profiler)."""
    return [t - sum(row[i] for row in row_times) for i, t in enumerate(iteration_times)]


def iteration_time(statistic: Statistic, iteration_times: Sequence[float], op_time: float,
                   gaps: Sequence[float] | None = None) -> float:
    """The iteration time by `statistic`: `of` the measured iteration times; for the minimum,
    the least of each part, as noise adds time to each: `op_time` (each row's least, summed)
    plus the least time between ops of any iteration (`gaps`, `between_ops`), 0 at least.
    Pairing each row's least with the least iteration would charge the noise in the other
    iterations' rows to the time between ops: on the dev VM the least iteration was 27-100 ms
    over its rows' least, while the time between ops was 15-47 ms in every iteration
    (bench/results/validate_cpu_r10 at d715217). Without `gaps`, the least iteration."""
    if statistic is Statistic.MIN and gaps:
        return op_time + max(0.0, min(gaps))
    return statistic.of(iteration_times)


# --- reading the capture ------------------------------------------------------------------

_SCOPE_RE = re.compile(rf"^{re.escape(SCOPE)}(-?\d+)::(\w+)$")


@dataclass(frozen=True, slots=True)
class _Where:
    layer: int
    sublayer: Sublayer
    core: int | str | None = None
    """Id of an attention-core scope whose ops are split by category and order."""
    category: Category | None = None
    """Category of the forward op a backward node belongs to."""
    module: str = ""
    """Module path ("BertModel_0/BertEncoder_0/BertLayer_3/..."), from module-call events
    and record_function annotations; "" outside any."""
    place: str = ""
    """The same calls as the module table reads them (Class#ordinal/...; `modules.py`)."""
    last: str = ""
    """The module the innermost module called last before this point ("" when none)."""


_SPECIFIC = (Category.DROPOUT, Category.ACTIVATION, Category.SOFTMAX, Category.LAYERNORM,
             Category.RMSNORM, Category.LOSS)
"""Forward categories whose backward's generic elementwise ops keep the forward's category
(CPU dropout is bernoulli_ + mul forward and a plain mul backward). Not the embedding: the
plain add in its backward node is autograd summing a tied weight's two gradients (word
embedding and MLM decoder), elementwise work as in the analytic table."""


_NOWHERE = _Where(-1, Sublayer.OTHER)
_MODULE_KIND_OF = (Category.ELEMENTWISE, Category.REDUCTION, Category.DATA_MOVEMENT)
"""Op categories a module's `[[kind]]` row replaces (`modules.ModuleMap.kind`)."""


def numel(shape: Any) -> int:
    """Elements of a recorded shape; of a tensor list's shapes (a collective's), their sum."""
    if not isinstance(shape, (list, tuple)) or not shape:
        return 0
    if all(isinstance(d, int) for d in shape):
        return math.prod(shape)
    return sum(numel(s) for s in shape)


def _flops(evt: Any) -> float:
    """FLOPs of `evt` and everything below it."""
    total, todo = 0.0, [evt]
    while todo:
        e = todo.pop()
        total += float(getattr(e, "flops", 0) or 0)
        todo.extend(e.cpu_children)
    return total


def _seqs(evt: Any) -> Iterable[tuple[int, Any]]:
    """(sequence number, event) of `evt` and every event below it that has one, in
    pre-order (parents before children, children in time order)."""
    todo = [evt]
    while todo:
        e = todo.pop()
        seq = getattr(e, "sequence_nr", -1)
        if seq is not None and seq >= 0:
            yield seq, e
        todo.extend(reversed(e.cpu_children))


Step = Generator[Any, Any, Any]
"""One step of the walk: yields the steps of its children (generators of the same kind) and
receives what each returns; returns its own result (`Attributor._run`)."""


@dataclass
class Attributor:
    """Turns profiler events, walked in time order, into op-table rows accumulated over the
    measured iterations."""

    classify: Classifier
    use_device_time: bool = False
    modules: ModuleMap = field(default_factory=builtin_modules)
    """Module paths -> layer and sublayer (`data/modules.toml`)."""
    rows: dict[tuple[Any, ...], list[float]] = field(default_factory=dict)
    """Row key -> [launches, FLOPs] over all walked iterations."""
    iteration: int = 0
    """Index of the measured iteration being walked (set by the caller; for `Statistic`)."""
    times: dict[tuple[Any, ...], dict[int, float]] = field(default_factory=dict)
    """Row key -> {iteration: time (us)}."""
    _seq: dict[int, tuple[_Where, Any]] = field(default_factory=dict)
    _core_gemms: dict[int, int] = field(default_factory=dict)
    _last: _Where = _NOWHERE

    def new_iteration(self) -> None:
        """Forget the previous iteration's forward ops (backward nodes look up only their
        own iteration's), so their events can be freed."""
        self._seq.clear()

    def end_tree(self) -> None:
        """Forget per-tree state keyed by event identity (ids are reused once freed)."""
        self._core_gemms.clear()

    def time_us(self, evt: Any) -> float:
        """Inclusive time of an event: kernel time on a device, else CPU time (us)."""
        return float(evt.device_time_total if self.use_device_time else evt.cpu_time_total)

    def walk(self, evt: Any, phase: Phase = Phase.FORWARD, where: _Where | None = None) -> float:
        """Emit rows for `evt` and below; returns the time emitted (us). Iterative: any
        nesting depth is walked (see the module docs)."""
        done = self._walk(evt, phase, where)
        return done if type(done) is float else float(_run(done))

    def _children(self, evt: Any, phase: Phase, where: _Where | None) -> Step:
        """Walk each child of `evt` in `phase` and `where`; their total time."""
        total = 0.0
        for c in evt.cpu_children:
            done = self._walk(c, phase, where)
            total += done if type(done) is float else (yield done)
        return total

    def _walk(self, evt: Any, phase: Phase, where: _Where | None) -> float | Step:
        """`walk` of one event: the time emitted (an op, attributed at once), or the step
        that walks its children (a subclass overrides this, not `walk`)."""
        name = evt.name
        if name.startswith(PHASE):
            ph = parse_enum(Phase, name[len(PHASE):], f"phase of a {PHASE} scope")
            return self._children(evt, ph, None)
        m = _SCOPE_RE.match(name)
        if m:
            layer, tag = int(m.group(1)), m.group(2)
            inner = (_Where(layer, Sublayer.ATTN_SCORE, core=id(evt)) if tag == ATTN_CORE
                     else _Where(layer, parse_enum(Sublayer, tag, f"sublayer of a {SCOPE} scope")))
            ph = Phase.RECOMPUTE if phase.is_backward or phase is Phase.RECOMPUTE else phase
            return self._children(evt, ph, inner)
        if name.startswith(_EVAL):
            return self._backward_node(evt)
        if name.startswith("Optimizer."):
            return self._children(evt, Phase.OPTIMIZER, where)
        if name.startswith(ITER) or name in _TRANSPARENT:
            return self._children(evt, phase, where)
        scope = self.scope_of(evt)
        if scope is not None:
            return self._scope_time(evt, phase, where or _NOWHERE, *scope)
        return self._add(evt, phase, where or _NOWHERE)[1]

    def _scope_time(self, evt: Any, phase: Phase, where: _Where, display: str,
                    cls: str) -> Step:
        """A module call walked from outside a module call: its time."""
        return (yield self._scope(evt, phase, where, display, cls, 0))[0]

    def scope_of(self, evt: Any) -> tuple[str, str] | None:
        """(display name, class) of an event that is a scope of the module path (a module
        call), None for an op. The trace reader adds record_function annotations."""
        return module_class(evt.name)

    def _scope(self, evt: Any, phase: Phase, where: _Where, display: str, cls: str,
               ordinal: int, first: int = 0) -> Step:
        """Walk a module call (or annotation): its children get the path, the layer index of
        a layer class (`first` + its ordinal among its parent's calls), and each op the
        module its module called last before it. Returns the time emitted and the number of
        layer calls made directly in it (a stack's layers): a later stack under the same
        parent numbers its layers after an earlier one's, as the analytic op table numbers
        T5's decoder layers after the encoder's. A step of the walk (`Step`)."""
        token = f"{cls}#{ordinal}"
        layer = where.layer
        if where.sublayer is Sublayer.OTHER and where.core is None:
            if self.modules.is_layer(cls):
                layer = first + ordinal
            elif (n := self.modules.dotted_layer(display)) is not None:
                layer = n
        inner = replace(where, layer=layer, last="",
                        module=f"{where.module}/{display}" if where.module else display,
                        place=f"{where.place}/{token}" if where.place else token)
        counts: dict[str, int] = {}
        total, offset, direct = 0.0, first, 0
        for c in evt.cpu_children:
            sc = self.scope_of(c)
            if sc is None:
                done = self._walk(c, phase, inner)
                total += done if type(done) is float else (yield done)
                continue
            n = counts.get(sc[1], 0)
            counts[sc[1]] = n + 1
            spent, stacked = yield self._scope(c, phase, inner, *sc, n, offset)
            total += spent
            offset += stacked
            direct += self.modules.is_layer(sc[1])
            inner = replace(inner, last=f"{sc[1]}#{n}")
        return total, direct

    def _backward_node(self, evt: Any) -> Step:
        """A backward node's rows (a step of the walk); returns the time emitted."""
        node = evt.name[len(_EVAL):]
        seq = evt.sequence_nr
        if seq is None or seq < 0:  # linked by a fwdbwd flow: the node's own op holds it
            seq = next((c.sequence_nr for c in evt.cpu_children
                        if c.name == node and (c.sequence_nr or -1) >= 0), -1)
        hit = self._seq.get(seq)
        # nodes without a forward op (AccumulateGrad of a parameter) run right after the node
        # that produced the parameter's gradient: they inherit its place, not its category
        # (a tied weight's gradient sum is an elementwise add, not part of the embedding)
        where, fwd = hit if hit is not None else (replace(self._last, category=None), None)
        self._last = where
        fwd_shape = _fwd_shape(fwd) if fwd is not None else None
        gemms = 0
        emitted: list[tuple[tuple[Any, ...], float]] = []
        children = self._node_ops(evt, node)
        total = 0.0
        recomputed = False
        for c in children:
            if c.name.startswith(SCOPE) or c.name.startswith(_EVAL):
                # checkpointing: unpacking a saved tensor reran the forward inside this node
                recomputed |= c.name.startswith(SCOPE)
                done = self._walk(c, Phase.BACKWARD, None)
                total += done if type(done) is float else (yield done)
                continue
            phase = _backward_phase(node, c.name, c, fwd_shape, self.classify, gemms)
            gemms += self.classify(c.name).is_gemm
            key, t = self._add(c, phase, where)
            emitted.append((key, t))
            total += t
        rest = self.time_us(evt) - total
        if rest <= 0 or recomputed:  # a recompute's Python gaps stay framework time
            return total
        if emitted:  # the node's own dispatch overhead goes to its largest op
            self._add_time(max(emitted, key=lambda kt: kt[1])[0], rest)
        else:  # a node that ran no ATen op of its own
            key = (node, where.layer, where.sublayer, Category.OTHER, Phase.BACKWARD,
                   0, 0, 0, 0, 0, where.module)
            self._accumulate(key, 0.0, rest)
        return total + rest

    def _node_ops(self, evt: Any, node: str) -> list[Any]:
        """What a backward node ran: the node's own event (named as the node) and the
        record_function annotations inside it (a custom Function's backward, a hook) are
        looked through, so their ops are the rows, with the node's place and phases (an
        annotation is not an op); bertscope's own scopes stay (a checkpoint's recompute)."""
        out = []
        todo = [iter(evt.cpu_children)]  # depth first, in time order, without recursion
        while todo:
            c = next(todo[-1], None)
            if c is None:
                todo.pop()
            elif c.name == node or (not c.name.startswith(SCOPE)
                                    and self.scope_of(c) is not None):
                todo.append(iter(c.cpu_children))
            else:
                out.append(c)
        return out

    def _add(self, evt: Any, phase: Phase, where: _Where) -> tuple[tuple[Any, ...], float]:
        name = evt.name
        cat = self.classify(name)
        shapes = list(getattr(evt, "input_shapes", None) or [])
        m = n = k = b = 0
        casts = 0.0
        if cat.is_gemm:
            # autocast's casts of the operands run inside the GEMM op (aten::linear): they
            # are copies, rows of their own, as the analytic table has them
            for c in evt.cpu_children:
                if _copies(c):
                    casts += self._add(c, phase, where)[1]
            m, n, k, b = gemm_shape(name, shapes)
            if b == 1 and cat is Category.BATCHED_GEMM:
                cat = Category.GEMM
        elements = 0 if cat.is_gemm else numel(shapes[0] if shapes else None)
        if cat is Category.ELEMENTWISE and phase.is_backward and where.category in _SPECIFIC \
                and not name.startswith(_GRAD_SYNC):
            cat = where.category
        if cat in _MODULE_KIND_OF and where.place:  # a norm written in Python, say
            cat = self.modules.kind(where.place.rpartition("/")[2].partition("#")[0]) or cat
        sub = self._sublayer(where, cat)
        if cat is Category.COMMUNICATION or name.startswith(_GRAD_SYNC):
            # a collective (DDP's all-reduce) or DDP's bucket copies, wherever they run
            where, sub, phase = _NOWHERE, Sublayer.OTHER, Phase.COMMUNICATION
        elif phase is Phase.OPTIMIZER:
            sub = Sublayer.OPTIMIZER
            if cat is Category.ELEMENTWISE:
                cat = Category.OPTIMIZER
        elif sub is Sublayer.OTHER and cat is Category.LOSS:
            sub = Sublayer.LOSS
        if phase in (Phase.FORWARD, Phase.RECOMPUTE):  # backward nodes will look these up
            for seq, e in _seqs(evt):
                self._seq[seq] = (_Where(where.layer, sub, category=cat, module=where.module),
                                  e)
        key = (name, where.layer, sub, cat, phase, m, n, k, b, elements, where.module)
        t = self.time_us(evt) - casts
        self._accumulate(key, _flops(evt), t)
        return key, t + casts

    def _sublayer(self, where: _Where, cat: Category) -> Sublayer:
        """The row's sublayer; an attention-core scope is split into score (first GEMM and
        the scaling/masking before softmax), softmax (+ dropout) and context (second GEMM)."""
        if where.core is None and where.sublayer is Sublayer.OTHER and where.place:
            hit = self.modules.place(f"{where.place}|{where.last}")
            if hit is not None:
                if hit.core is None:
                    return hit.sublayer
                where = replace(where, core=hit.core)
        if where.core is None:
            return where.sublayer
        if cat in (Category.SOFTMAX, Category.DROPOUT):
            return Sublayer.ATTN_SOFTMAX
        nth = self._core_gemms.get(where.core, 0)
        if cat.is_gemm:
            self._core_gemms[where.core] = nth + 1
            return Sublayer.ATTN_SCORE if nth == 0 else Sublayer.ATTN_CONTEXT
        return Sublayer.ATTN_SCORE if nth <= 1 else Sublayer.ATTN_CONTEXT

    def _accumulate(self, key: tuple[Any, ...], flops: float, t: float) -> None:
        acc = self.rows.setdefault(key, [0.0, 0.0])
        acc[0] += 1
        acc[1] += flops
        self._add_time(key, t)

    def _add_time(self, key: tuple[Any, ...], t: float) -> None:
        per = self.times.setdefault(key, {})
        per[self.iteration] = per.get(self.iteration, 0.0) + t

    def ops(self, iterations: int, statistic: Statistic = Statistic.MEAN) -> list[Op]:
        """Rows per training iteration: count and FLOPs averaged, time by `statistic` over
        the iterations 0 .. iterations - 1 (a row absent from an iteration took 0 there;
        the minimum is the least over the iterations that ran it)."""
        out = []
        for key, (cnt, fl) in self.rows.items():
            name, layer, sub, cat, phase, m, n, k, b, el, module = key
            per = self.times[key]
            t = statistic.of_row([per.get(i, 0.0) for i in range(iterations)])
            out.append(Op(name, layer, sub, cat, phase, m=m, n=n, k=k, batch=b, elements=el,
                          count=max(1, round(cnt / iterations)), flops=fl / iterations,
                          time_s=t * 1e-6, module=module))
        return out

    def per_iteration(self, iterations: int) -> list[list[float]]:
        """Each row's time (s) in each iteration 0 .. iterations - 1 (0 where it did not
        run), rows in the order `ops` gives them: what any statistic is taken over."""
        return [[self.times[key].get(i, 0.0) * 1e-6 for i in range(iterations)]
                for key in self.rows]


_CAST_OPS = ("aten::to", "aten::_to_copy")


def _run(step: Step) -> Any:
    """Run a walk step and every step it yields from one explicit stack; its result."""
    stack, value = [step], None
    while stack:
        try:
            child = stack[-1].send(value)
        except StopIteration as done:
            stack.pop()
            value = done.value
            continue
        stack.append(child)
        value = None
    return value


def _copies(evt: Any) -> bool:
    """A dtype cast that copies (`aten::to` that reached `aten::_to_copy`; a cast to the
    dtype a tensor already has returns it and copies nothing)."""
    todo = [evt]
    while todo:
        e = todo.pop()
        if e.name == "aten::_to_copy":
            return True
        if e.name in _CAST_OPS:
            todo.extend(e.cpu_children)
    return False


def _fwd_shape(fwd_evt: Any) -> tuple[int, int, int] | None:
    """(rows T, in features K, out features N) of the forward GEMM behind a Linear node."""
    m, n, k, _ = gemm_shape(fwd_evt.name, list(getattr(fwd_evt, "input_shapes", None) or []))
    return (m, k, n) if m else None


def _backward_phase(node: str, op: str, evt: Any, fwd: tuple[int, int, int] | None,
                    classify: Classifier, nth_gemm: int) -> Phase:
    """Data- or weight-gradient phase of one op inside backward node `node`.

    In a Linear node (forward X[T, K] @ W^T[K, N]) the data gradient is dY[T, N] @ W[N, K]
    and the weight gradient X^T[K, T] @ dY[T, N] (or dY^T[N, T] @ X[T, K], the layout
    autograd picks for a transposed weight); when the shapes cannot tell them apart,
    autograd's order does (derivatives.yaml computes mat1's gradient first)."""
    if node in _WEIGHT_GRAD_NODES or op in _WEIGHT_GRAD_NODES:
        return Phase.BACKWARD_WEIGHT
    for prefix, phase in _NODE_PHASES:
        if node.startswith(prefix):
            return phase
    if node in _LINEAR_BWD:
        cat = classify(op)
        if cat is Category.REDUCTION:
            return Phase.BACKWARD_WEIGHT  # the bias gradient
        if cat.is_gemm:
            m, n, k, _ = gemm_shape(op, list(getattr(evt, "input_shapes", None) or []))
            if fwd is not None:
                t, k_in, n_out = fwd
                dgrad = (m, k, n) == (t, n_out, k_in)
                wgrad = k == t and {m, n} == {k_in, n_out}  # dW or dW^T, as autograd picks
                if dgrad != wgrad:
                    return Phase.BACKWARD_WEIGHT if wgrad else Phase.BACKWARD_DATA
            return Phase.BACKWARD_DATA if nth_gemm == 0 else Phase.BACKWARD_WEIGHT
    return Phase.BACKWARD_DATA


__all__ = ["ATTN_CORE", "ITER", "PHASE", "SCOPE", "Attributor", "Statistic", "Step", "gemm_shape",
           "numel"]
