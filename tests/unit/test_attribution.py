"""Attribution logic on hand-built event trees (no profiler run): scopes, backward nodes
by sequence number, data/weight-gradient split, recompute, and device (CUDA) time."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
from bertscope.measure.attribution import Attributor, gemm_shape  # noqa: E402
from bertscope.taxonomy import Category, Classifier, Phase, Sublayer  # noqa: E402


def ev(name, t=10.0, children=(), seq=-1, shapes=None, flops=0, dev=None):
    e = SimpleNamespace(name=name, cpu_time_total=t, device_time_total=t if dev is None else dev,
                        cpu_children=list(children), cpu_parent=None, sequence_nr=seq,
                        input_shapes=shapes or [], flops=flops,
                        device_type=torch.autograd.DeviceType.CPU)
    for c in e.cpu_children:
        c.cpu_parent = e
    return e


def iteration(device_time: float | None = None):
    # forward: layer 0 FFN1 = aten::linear (X[32, 64] x W[256, 64]) creating autograd node 7
    addmm = ev("aten::addmm", 40, seq=7, shapes=[[256], [32, 64], [64, 256]], flops=1_048_576,
               dev=device_time)
    linear = ev("aten::linear", 50, [addmm], seq=6, shapes=[[32, 64], [256, 64], [256]],
                dev=device_time)
    fwd = ev("bertscope.phase::forward", 60, [ev("bertscope::0::ffn1", 55, [linear])])
    # backward: AddmmBackward0 with seq 7: dgrad mm [32,256]x[256,64], wgrad [256,32]x[32,64]
    dgrad = ev("aten::mm", 30, shapes=[[32, 256], [256, 64]], flops=1_048_576)
    wgrad = ev("aten::mm", 35, shapes=[[256, 32], [32, 64]], flops=1_048_576)
    bias = ev("aten::sum", 5, shapes=[[32, 256], [], [], []])
    node = ev("autograd::engine::evaluate_function: AddmmBackward0", 80,
              [ev("AddmmBackward0", 68, [dgrad, wgrad]), bias], seq=7)
    acc = ev("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 4,
             [ev("torch::autograd::AccumulateGrad", 3, [ev("aten::add_", 2, shapes=[[256]])])])
    bwd = ev("bertscope.phase::backward", 90, [node, acc])
    opt = ev("bertscope.phase::optimizer", 20,
             [ev("Optimizer.step#Adam.step", 18, [ev("aten::_foreach_add_", 15)])])
    return ev("bertscope.iter::0", 200, [fwd, bwd, opt])


def rows(attr):
    return {(o.name, o.phase): o for o in attr.ops(1)}


def test_scopes_sequence_numbers_and_gradient_split() -> None:
    a = Attributor(Classifier())
    a.walk(iteration())
    r = rows(a)
    f = r[("aten::linear", Phase.FORWARD)]
    assert (f.layer, f.sublayer, f.category) == (0, Sublayer.FFN1, Category.GEMM)
    assert (f.m, f.n, f.k) == (32, 256, 64)
    assert f.flops == 1_048_576  # the addmm child's count, summed up the tree
    names = {(o.name, o.phase, o.sublayer, o.layer) for o in a.ops(1)}
    assert ("aten::mm", Phase.BACKWARD_DATA, Sublayer.FFN1, 0) in names
    assert ("aten::mm", Phase.BACKWARD_WEIGHT, Sublayer.FFN1, 0) in names
    assert r[("aten::sum", Phase.BACKWARD_WEIGHT)].category is Category.REDUCTION
    # AccumulateGrad has no sequence number: it inherits the preceding node's place
    acc = r[("aten::add_", Phase.BACKWARD_WEIGHT)]
    assert (acc.layer, acc.sublayer) == (0, Sublayer.FFN1)
    opt = r[("aten::_foreach_add_", Phase.OPTIMIZER)]
    assert (opt.sublayer, opt.category) == (Sublayer.OPTIMIZER, Category.OPTIMIZER)
    # the node's own overhead (80 - 30 - 35 - 5 = 10 us) goes to its largest op (wgrad)
    wg = next(o for o in a.ops(1) if o.phase is Phase.BACKWARD_WEIGHT and o.name == "aten::mm")
    assert wg.time_s == pytest.approx(45e-6)
    from bertscope.trace.attribute import Statistic

    wg = next(o for o in a.ops(1, Statistic.MEDIAN)
              if o.phase is Phase.BACKWARD_WEIGHT and o.name == "aten::mm")
    assert wg.time_s == pytest.approx(45e-6)  # the median keeps the folded overhead too


def test_accumulate_grad_takes_the_place_but_not_the_category_of_the_node_before() -> None:
    # a tied word embedding: its AccumulateGrad sums the embedding and decoder gradients with
    # aten::add right after EmbeddingBackward0; the add is elementwise, not embedding work
    emb = ev("aten::embedding", 10, seq=3, shapes=[[100, 8], [2, 4]])
    fwd = ev("bertscope.phase::forward", 12, [ev("bertscope::-1::embedding", 11, [emb])])
    # autograd sums the two gradients in the embedding's node (its input buffer), and an
    # AccumulateGrad that adds into an existing .grad runs right after it
    node = ev("autograd::engine::evaluate_function: EmbeddingBackward0", 30,
              [ev("EmbeddingBackward0", 25, [ev("aten::embedding_backward", 20,
                                                 shapes=[[2, 4, 8]])]),
               ev("aten::add", 4, shapes=[[100, 8], [100, 8]])], seq=3)
    acc = ev("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 9,
             [ev("torch::autograd::AccumulateGrad", 8,
                 [ev("aten::add_", 7, shapes=[[100, 8], [100, 8]])])])
    a = Attributor(Classifier())
    a.walk(ev("bertscope.iter::0", 60, [fwd, ev("bertscope.phase::backward", 40, [node, acc])]))
    by_name = {o.name: o for o in a.ops(1)}
    assert by_name["aten::embedding_backward"].category is Category.EMBEDDING
    for name in ("aten::add", "aten::add_"):
        add = by_name[name]
        assert (add.layer, add.sublayer, add.category) == (-1, Sublayer.EMBEDDING,
                                                           Category.ELEMENTWISE)


def test_median_statistic_ignores_one_slow_iteration() -> None:
    from bertscope.trace.attribute import Statistic

    a = Attributor(Classifier())
    add_times = (10.0, 30.0, 1000.0)  # us; the last iteration hit a stall
    for i, t in enumerate(add_times):
        a.iteration = i
        kids = [ev("aten::add", t, shapes=[[4]])]
        if i == 0:
            kids.append(ev("aten::mul", 6.0, shapes=[[4]]))  # ran in iteration 0 only
        a.walk(ev(f"bertscope.iter::{i}", t + 6, [ev("bertscope.phase::forward", t + 6, kids)]))
    mean = {o.name: o.time_s for o in a.ops(3)}
    median = {o.name: o.time_s for o in a.ops(3, Statistic.MEDIAN)}
    assert mean["aten::add"] == pytest.approx((10 + 30 + 1000) / 3 * 1e-6)
    assert median["aten::add"] == pytest.approx(30e-6)  # median of 10, 30, 1000
    assert mean["aten::mul"] == pytest.approx(2e-6)  # 6 / 3
    assert median["aten::mul"] == 0.0  # median of 6, 0, 0
    least = {o.name: o.time_s for o in a.ops(3, Statistic.MIN)}
    assert least["aten::add"] == pytest.approx(10e-6)  # least of 10, 30, 1000
    assert least["aten::mul"] == pytest.approx(6e-6)  # least of the one iteration it ran


def test_the_least_iteration_is_the_least_of_each_part() -> None:
    from bertscope.trace.attribute import Statistic, between_ops, iteration_time

    # two rows over three iterations (s); iterations of 10, 12 and 11 s
    rows = [[3.0, 5.0, 4.0], [4.0, 4.0, 6.0]]
    gaps = between_ops([10.0, 12.0, 11.0], rows)
    assert gaps == [3.0, 3.0, 1.0]  # 10 - 7, 12 - 9, 11 - 10
    # rows' least 3 + 4 = 7, plus the least gap 1: 8, below the least iteration (10)
    assert iteration_time(Statistic.MIN, [10.0, 12.0, 11.0], 7.0, gaps) == 8.0
    assert iteration_time(Statistic.MIN, [10.0, 12.0, 11.0], 7.0) == 10.0  # no gaps known
    assert iteration_time(Statistic.MEDIAN, [10.0, 12.0, 11.0], 7.0, gaps) == 11.0
    assert iteration_time(Statistic.MIN, [5.0], 7.0, [-2.0]) == 7.0  # never below the rows


def test_statistic_of_values() -> None:
    from bertscope.trace.attribute import Statistic

    values = [0.3, 0.1, 0.5, 0.2]
    assert Statistic.MEAN.of(values) == pytest.approx(1.1 / 4)
    assert Statistic.MEDIAN.of(values) == pytest.approx(0.25)  # (0.2 + 0.3) / 2
    assert Statistic.MIN.of(values) == 0.1


def test_device_time_is_used_on_cuda() -> None:
    a = Attributor(Classifier(), use_device_time=True)
    a.walk(iteration(device_time=7.0))
    f = rows(a)[("aten::linear", Phase.FORWARD)]
    assert f.time_s == pytest.approx(7e-6)


def test_recompute_inside_a_backward_node() -> None:
    recomputed = ev("bertscope::3::ffn2", 20, [ev("aten::linear", 15, seq=50,
                                                  shapes=[[8, 16], [4, 16], [4]])])
    node = ev("autograd::engine::evaluate_function: NativeLayerNormBackward0", 100,
              [ev("NativeLayerNormBackward0", 90,
                  [recomputed, ev("aten::native_layer_norm_backward", 12)])], seq=99)
    a = Attributor(Classifier())
    a.walk(ev("bertscope.phase::backward", 100, [node]))
    r = rows(a)
    assert r[("aten::linear", Phase.RECOMPUTE)].layer == 3
    ln = r[("aten::native_layer_norm_backward", Phase.BACKWARD)]
    assert ln.time_s == pytest.approx(12e-6)  # Python gaps of the recompute are not folded


@pytest.mark.parametrize(
    ("name", "shapes", "want"),
    [
        ("aten::addmm", [[256], [32, 64], [64, 256]], (32, 256, 64, 1)),
        ("aten::linear", [[2, 16, 64], [256, 64], [256]], (32, 256, 64, 1)),
        ("aten::bmm", [[8, 16, 4], [8, 4, 16]], (16, 16, 4, 8)),
        ("aten::matmul", [[2, 4, 16, 8], [2, 4, 8, 16]], (16, 16, 8, 8)),
        ("aten::matmul", [[5, 3], [3, 7]], (5, 7, 3, 1)),
    ],
)
def test_gemm_shapes(name, shapes, want) -> None:
    assert gemm_shape(name, shapes) == want


def test_backward_on_another_thread_is_walked_within_the_iteration() -> None:
    # CUDA: the autograd engine runs backward nodes on its own thread, as separate roots
    from bertscope.measure.profile import walk_capture

    it = iteration()
    fwd, bwd, opt = it.cpu_children
    it.cpu_children = [fwd, opt]  # the main thread keeps forward and optimizer
    node = bwd.cpu_children[0]
    outside = ev("autograd::engine::evaluate_function: AddmmBackward0", 5, seq=7)
    for e, start, thread in ((it, 0, 1), (node, 100, 2), (outside, 500, 2)):
        e.cpu_parent, e.thread = None, thread
        e.time_range = SimpleNamespace(start=start, end=start + e.cpu_time_total)
    a = Attributor(Classifier())
    total = walk_capture(a, [outside, node, it], completed=1)
    assert total == 200
    r = rows(a)
    assert r[("aten::mm", Phase.BACKWARD_WEIGHT)].layer == 0  # the node inside the window
    assert r[("aten::mm", Phase.BACKWARD_WEIGHT)].count == 1  # ... and not the one after it


def test_kernel_events_of_a_cuda_capture_are_not_walked_again() -> None:
    # A CUDA capture lists each kernel as an event of its own, without a CPU parent, on a
    # thread of its own (the stream) and inside the iteration's time: it is already counted
    # as the device time of the host op that launched it, so it is no root of the walk
    from bertscope.measure.profile import walk_capture

    it = iteration()
    kernel = ev("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 30)
    kernel.device_type = torch.autograd.DeviceType.CUDA
    for e, start, thread in ((it, 0, 1), (kernel, 50, 7)):
        e.cpu_parent, e.thread = None, thread
        e.time_range = SimpleNamespace(start=start, end=start + e.cpu_time_total)
    a = Attributor(Classifier())
    walk_capture(a, [it, kernel], completed=1)
    names = {key[0] for key in a.rows}
    assert "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT" not in names
    # the iteration's own ops are all there: the forward GEMM, both backward GEMMs
    assert {"aten::linear", "aten::mm"} <= names


def test_gemm_shapes_come_from_the_one_registry() -> None:
    from bertscope.trace import attribute, gemm_ops

    assert gemm_shape is gemm_ops.gemm_shape is attribute.gemm_shape


def test_unknown_scope_names_are_one_line_errors() -> None:
    from bertscope.errors import BertscopeError

    with pytest.raises(BertscopeError, match=r"unknown phase of a bertscope\.phase:: scope"):
        Attributor(Classifier()).walk(ev("bertscope.phase::sideways", 5))
    with pytest.raises(BertscopeError, match="unknown sublayer of a bertscope:: scope 'nope'"):
        Attributor(Classifier()).walk(ev("bertscope::0::nope", 5))
