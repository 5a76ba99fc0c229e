//! Tensors, views and the backend interface: layout rules, allocation,
//! copies, and every error path a user can hit.

mod common;

use std::sync::Arc;

use proptest::prelude::*;
use strata::backend::{
    alloc_tensors, tensor_copy, tensor_get, tensor_memset, tensor_set, Buffer, BufferUsage,
    MultiBuffer, Registry,
};
use strata::cpu::{cpu_buffer_type, HostBuffer, HostBufferType};
use strata::{ops, DType, Error, Tensor};

fn alloc(ts: &[&Tensor]) -> MultiBuffer {
    let v: Vec<Tensor> = ts.iter().map(|t| (*t).clone()).collect();
    alloc_tensors(&v, &cpu_buffer_type()).unwrap()
}

#[test]
fn unallocated_tensor_is_a_typed_error_naming_it() {
    let t = Tensor::new(DType::F32, &[4]).unwrap().with_name("matrix_C");
    let e = t.write_f32(&[1.0; 4]).unwrap_err();
    assert!(
        matches!(&e, Error::Unallocated { tensor } if tensor == "matrix_C"),
        "{e}"
    );
    assert!(
        e.to_string().contains("alloc_tensors"),
        "says how to allocate: {e}"
    );
    assert!(matches!(t.to_f32_vec(), Err(Error::Unallocated { .. })));
    assert!(matches!(
        tensor_memset(&t, 0, 4, 0),
        Err(Error::Unallocated { .. })
    ));
    // a view of an unallocated tensor is unallocated too
    let v = ops::view_1d(&t, 2, 4).unwrap();
    assert!(matches!(v.to_f32_vec(), Err(Error::Unallocated { .. })));
    // computing it is an error too, not an abort
    let s = ops::sqr(&t).unwrap();
    let g = strata::Graph::build(&[s]);
    assert!(matches!(
        strata::cpu::compute(&g, 1),
        Err(Error::Unallocated { .. })
    ));
}

#[test]
fn out_of_range_reads_and_writes_are_errors() {
    let t = Tensor::new(DType::F32, &[4]).unwrap().with_name("t");
    let _b = alloc(&[&t]);
    assert!(matches!(
        tensor_set(&t, 8, &[0u8; 12]),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        tensor_set(&t, usize::MAX, &[0u8; 2]),
        Err(Error::OutOfBounds { .. })
    ));
    let mut out = [0u8; 20];
    assert!(matches!(
        tensor_get(&t, 0, &mut out),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(t.write_f32(&[1.0; 5]).is_err(), "wrong element count");
    assert!(t.write_i32(&[1; 4]).is_err(), "wrong type");
    tensor_set(&t, 4, &2.5f32.to_le_bytes()).unwrap();
    tensor_memset(&t, 8, 8, 0).unwrap();
    assert_eq!(t.to_f32_vec().unwrap(), vec![0.0, 2.5, 0.0, 0.0]);
}

#[test]
fn placing_beyond_a_buffer_and_placing_views_are_errors() {
    let buf = cpu_buffer_type().alloc_buffer(16).unwrap();
    let t = Tensor::new(DType::F32, &[8]).unwrap();
    assert!(matches!(
        t.set_storage(buf.clone(), 0),
        Err(Error::OutOfBounds { .. })
    ));
    let small = Tensor::new(DType::F32, &[2]).unwrap();
    small.set_storage(buf.clone(), 8).unwrap();
    let v = ops::view_1d(&small, 1, 4).unwrap();
    assert!(v.set_storage(buf, 0).is_err());
    assert_eq!(
        v.storage().unwrap().offset,
        12,
        "a view's storage follows its base"
    );
}

#[test]
fn read_only_buffers_refuse_writes_and_compute() {
    let bytes: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let keep = bytes.clone();
    let ptr = std::ptr::NonNull::new(keep.as_ptr() as *mut u8).unwrap();
    // SAFETY: `keep` is moved into the buffer as its owner and never written.
    let buf: Arc<dyn Buffer> =
        Arc::new(unsafe { HostBuffer::from_raw_parts(ptr, 16, Box::new(keep), true) });
    let w = Tensor::new(DType::F32, &[4]).unwrap().with_name("w");
    w.set_storage(buf.clone(), 0).unwrap();
    assert_eq!(w.to_f32_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    assert!(w.write_f32(&[0.0; 4]).is_err());
    assert!(buf.clear(0).is_err());
    // an op whose result would land in read-only memory is refused
    let out = ops::cpy(&w, &ops::view_1d(&w, 4, 0).unwrap()).unwrap();
    let g = strata::Graph::build(&[out]);
    let e = strata::cpu::compute(&g, 1).unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
}

#[test]
fn alloc_tensors_packs_into_as_few_buffers_as_max_size_allows() {
    let buft = HostBufferType::with_max_size(256);
    let ts: Vec<Tensor> = (0..10)
        .map(|i| Tensor::new(DType::F32, &[16 + i]).unwrap())
        .collect();
    let bufs = alloc_tensors(&ts, &buft).unwrap();
    // each tensor takes 64..128 aligned bytes; 256 bytes hold at most 3
    assert!(bufs.len() >= 4 && bufs.len() <= 5, "{} buffers", bufs.len());
    assert!(bufs.iter().all(|b| b.size() <= 256));
    for t in &ts {
        let st = t.storage().unwrap();
        assert_eq!(st.offset % 64, 0);
        assert!(st.offset + t.nbytes() <= st.buffer.size());
    }
    // no two tensors overlap
    for (i, a) in ts.iter().enumerate() {
        for b in &ts[i + 1..] {
            let (sa, sb) = (a.storage().unwrap(), b.storage().unwrap());
            if Arc::ptr_eq(&sa.buffer, &sb.buffer) {
                assert!(sa.offset + a.nbytes() <= sb.offset || sb.offset + b.nbytes() <= sa.offset);
            }
        }
    }
    let huge = Tensor::new(DType::F32, &[100]).unwrap().with_name("huge");
    let e = alloc_tensors(&[huge], &buft).expect_err("too large");
    assert!(e.to_string().contains("huge"), "{e}");
}

#[test]
fn copies_between_buffers_and_usage() {
    let a = Tensor::new(DType::F16, &[5, 3]).unwrap();
    let b = Tensor::new(DType::F16, &[5, 3]).unwrap();
    let bufs_a = alloc(&[&a]);
    let bufs_b = alloc(&[&b]);
    bufs_a[0].set_usage(BufferUsage::Weights);
    assert_eq!(bufs_a[0].usage(), BufferUsage::Weights);
    assert_eq!(bufs_b[0].usage(), BufferUsage::Any);
    let vals: Vec<f32> = (0..15).map(|i| i as f32 * 0.25).collect();
    a.write_f32(&vals).unwrap();
    tensor_copy(&a, &b).unwrap();
    assert_eq!(b.to_f32_vec().unwrap(), vals);
    let c = Tensor::new(DType::F32, &[5, 3]).unwrap();
    let _bc = alloc(&[&c]);
    assert!(tensor_copy(&a, &c).is_err(), "layouts differ");
}

/// Issue 15 item 1: equal type, shape and size but other strides (a
/// transposed view) is refused as ggml refuses it, not copied byte for byte.
#[test]
fn copies_between_equal_shapes_with_other_strides_are_refused() {
    let a = Tensor::new(DType::F32, &[3, 3]).unwrap().with_name("a");
    let b = Tensor::new(DType::F32, &[3, 3]).unwrap().with_name("b");
    let _bufs = alloc(&[&a, &b]);
    a.write_f32(&[1., 2., 3., 4., 5., 6., 7., 8., 9.]).unwrap();
    b.write_f32(&[0.0; 9]).unwrap();
    let at = ops::transpose(&a).unwrap().with_name("a_T");
    assert_eq!((at.ne(), at.nbytes()), (b.ne(), b.nbytes()));
    let e = tensor_copy(&at, &b).unwrap_err().to_string();
    assert!(e.contains("a_T") && e.contains("strides"), "{e}");
    assert!(tensor_copy(&b, &at).is_err());
    assert_eq!(b.to_f32_vec().unwrap(), vec![0.0; 9], "nothing written");
    // a view with the same strides copies
    let row = ops::view_1d(&a, 3, 3 * 4).unwrap();
    let dst = Tensor::new(DType::F32, &[3]).unwrap();
    let _d = alloc(&[&dst]);
    tensor_copy(&row, &dst).unwrap();
    assert_eq!(dst.to_f32_vec().unwrap(), vec![4., 5., 6.]);
}

/// Issue 16 item 5: a copy whose source and destination overlap inside one
/// host buffer (reachable from COPY_TENSOR) is a memmove, for either
/// direction of overlap and for identical ranges; a read-only buffer refuses it.
#[test]
fn overlapping_copies_in_one_buffer_behave_like_memmove() {
    let whole = Tensor::new(DType::I8, &[512]).unwrap().with_name("whole");
    let buf: Arc<dyn Buffer> = Arc::new(HostBuffer::from_vec(vec![0u8; 512]));
    whole.set_storage(buf.clone(), 0).unwrap();
    let init: Vec<u8> = (0..512).map(|i| (i * 7 + 3) as u8).collect();
    for (src_at, dst_at, len) in [(0, 5, 300), (64, 3, 400), (100, 100, 256), (7, 8, 1)] {
        whole.write_bytes(0, &init).unwrap();
        let src = Tensor::new(DType::I8, &[len]).unwrap().with_name("src");
        let dst = Tensor::new(DType::I8, &[len]).unwrap().with_name("dst");
        src.set_storage(buf.clone(), src_at).unwrap();
        dst.set_storage(buf.clone(), dst_at).unwrap();
        tensor_copy(&src, &dst).unwrap();
        let mut want = init.clone();
        want.copy_within(src_at..src_at + len, dst_at);
        assert_eq!(
            whole.read_bytes().unwrap(),
            want,
            "{src_at} -> {dst_at} ({len})"
        );
    }
    // the same through the CPU buffer type's own allocation
    let a = Tensor::new(DType::F32, &[64]).unwrap();
    let bufs = alloc(&[&a]);
    let vals: Vec<f32> = (0..64).map(|i| i as f32).collect();
    a.write_f32(&vals).unwrap();
    let lo = Tensor::new(DType::F32, &[48]).unwrap();
    let hi = Tensor::new(DType::F32, &[48]).unwrap();
    lo.set_storage(bufs[0].clone(), 0).unwrap();
    hi.set_storage(bufs[0].clone(), 16 * 4).unwrap();
    tensor_copy(&lo, &hi).unwrap();
    let got = a.to_f32_vec().unwrap();
    assert_eq!(&got[..16], &vals[..16]);
    assert_eq!(&got[16..], &vals[..48]);
    // a read-only buffer refuses the copy instead of writing
    let keep = init.clone();
    let ptr = std::ptr::NonNull::new(keep.as_ptr() as *mut u8).unwrap();
    // SAFETY: `keep` is moved into the buffer as its owner and never written.
    let ro: Arc<dyn Buffer> =
        Arc::new(unsafe { HostBuffer::from_raw_parts(ptr, 512, Box::new(keep), true) });
    let (s, d) = (
        Tensor::new(DType::I8, &[8]).unwrap(),
        Tensor::new(DType::I8, &[8]).unwrap(),
    );
    s.set_storage(ro.clone(), 0).unwrap();
    d.set_storage(ro.clone(), 4).unwrap();
    let e = tensor_copy(&s, &d).unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
}

/// Issue 16: the CPU backend's scratch is bounded when asked (a received
/// graph could ask for gigabytes), and refusing is a typed error.
#[test]
fn work_memory_limit_is_a_typed_error() {
    use strata::backend::Backend;
    let w = Tensor::new(DType::Q8_0, &[64, 64]).unwrap();
    let x = Tensor::new(DType::F32, &[64, 8]).unwrap();
    let y = ops::mul_mat(&w, &x).unwrap();
    let g = strata::Graph::build(&[y.clone()]);
    let _bufs = strata::cpu::alloc_graph_host(&g).unwrap();
    let mut be = strata::cpu::CpuBackend::new(1);
    assert!(Backend::set_work_limit(&mut be, Some(16)));
    let e = be.graph_compute(&g).unwrap_err();
    assert!(
        matches!(e, Error::OutOfMemory { .. }) && e.to_string().contains("work memory"),
        "{e}"
    );
    Backend::set_work_limit(&mut be, None);
    be.graph_compute(&g).unwrap();
    assert!(be.work_size() > 16);
}

#[test]
fn registry_creates_cpu_and_reports_memory() {
    let reg = Registry::with_defaults();
    let devs = reg.devices();
    assert_eq!(devs.len(), 1);
    let mem = devs[0].memory().unwrap();
    assert!(mem.total > 0 && mem.free <= mem.total);
    assert!(devs[0].supports_buft(&cpu_buffer_type()));
    let e = reg.backend("CUDA0").err().expect("unknown device");
    assert!(e.to_string().contains("CPU"), "lists known devices: {e}");
}

#[test]
fn shape_errors_name_the_op_and_shapes() {
    let a = Tensor::new(DType::F32, &[4, 3]).unwrap();
    let b = Tensor::new(DType::F32, &[3, 4]).unwrap();
    let e = ops::add(&a, &b).unwrap_err().to_string();
    assert!(e.contains("ADD") && e.contains("[3, 4, 1, 1]"), "{e}");
    assert!(ops::reshape(&a, &[5, 2]).is_err());
    assert!(
        ops::reshape(&ops::transpose(&a).unwrap(), &[12]).is_err(),
        "not contiguous"
    );
    assert!(ops::view_2d(&a, 4, 3, 16, 4).is_err(), "past the end");
    assert!(ops::permute(&a, [0, 0, 1, 2]).is_err());
    assert!(
        Tensor::new(DType::Q4_0, &[33]).is_err(),
        "row not a multiple of the block"
    );
    assert!(Tensor::new(DType::F32, &[]).is_err());
    assert!(Tensor::new(DType::F32, &[1, 2, 3, 4, 5]).is_err());
    assert!(Tensor::new(DType::F32, &[usize::MAX, 2]).is_err());
    let q = Tensor::new(DType::Q8_0, &[64, 2]).unwrap();
    assert!(ops::transpose(&q).is_err());
    let idx = Tensor::new(DType::F32, &[2]).unwrap();
    assert!(ops::get_rows(&q, &idx).is_err(), "indices must be i32");
}

#[test]
fn contiguity_and_sizes() {
    let t = Tensor::new(DType::F32, &[3, 4, 5]).unwrap();
    assert_eq!(t.nbytes(), 240);
    assert!(t.is_contiguous());
    let tt = ops::transpose(&t).unwrap();
    assert!(!tt.is_contiguous() && tt.is_transposed());
    assert_eq!(tt.ne(), [4, 3, 5, 1]);
    assert_eq!(tt.nbytes(), 240);
    let p = ops::permute(&t, [2, 0, 1, 3]).unwrap();
    assert_eq!(p.ne(), [4, 5, 3, 1]);
    assert_eq!(p.nb(), [12, 48, 4, 240]);
    let q = Tensor::new(DType::Q4_1, &[64, 3]).unwrap();
    assert_eq!(q.row_size(), 40);
    assert_eq!(q.nbytes(), 120);
    // dims of size 1 may have any stride
    let v = ops::view_2d(&t, 3, 1, 999, 0).unwrap();
    assert!(v.is_contiguous());
}

fn any_dims() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..6, 1..=4)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Reading a permuted / transposed / strided view gives exactly the elements
    /// its strides select from the base tensor.
    #[test]
    fn views_select_the_right_elements(dims in any_dims(), axes in Just([0usize,1,2,3]).prop_shuffle(), off in 0usize..3) {
        let t = Tensor::new(DType::F32, &dims).unwrap();
        let _b = alloc(&[&t]);
        let n = t.nelements();
        let vals: Vec<f32> = (0..n).map(|i| i as f32).collect();
        t.write_f32(&vals).unwrap();
        let ne = t.ne();
        let nb = t.nb();
        let get = |i: [usize; 4], nb: [usize; 4], base: usize| vals[(base + i[0]*nb[0] + i[1]*nb[1] + i[2]*nb[2] + i[3]*nb[3]) / 4];

        let p = ops::permute(&t, axes).unwrap();
        let pv = p.to_f32_vec().unwrap();
        let pne = p.ne();
        let mut k = 0;
        for i3 in 0..pne[3] { for i2 in 0..pne[2] { for i1 in 0..pne[1] { for i0 in 0..pne[0] {
            prop_assert_eq!(pv[k], get([i0, i1, i2, i3], p.nb(), 0));
            k += 1;
        }}}}
        prop_assert_eq!(p.nelements(), n);

        // a strided sub-view: skip `off` elements, keep the strides
        if ne[0] > off {
            let v = ops::view_4d(&t, [ne[0] - off, ne[1], ne[2], ne[3]], nb[1], nb[2], nb[3], off * 4).unwrap();
            let vv = v.to_f32_vec().unwrap();
            let mut k = 0;
            for i3 in 0..ne[3] { for i2 in 0..ne[2] { for i1 in 0..ne[1] { for i0 in 0..ne[0] - off {
                prop_assert_eq!(vv[k], get([i0, i1, i2, i3], nb, off * 4));
                k += 1;
            }}}}
            // a view of a view flattens to the base with summed offsets
            let vv2 = ops::view_1d(&v, 1, 4 * (ne[0] - off - 1)).unwrap();
            prop_assert!(vv2.view_of().unwrap().src == t);
            prop_assert_eq!(vv2.to_f32_vec().unwrap()[0], vals[ne[0] - 1]);
        }

        // reshape keeps the data order
        let r = ops::reshape(&t, &[n]).unwrap();
        prop_assert_eq!(r.to_f32_vec().unwrap(), vals.clone());
        let tt = ops::transpose(&ops::transpose(&t).unwrap()).unwrap();
        prop_assert_eq!(tt.ne(), ne);
        prop_assert_eq!(tt.to_f32_vec().unwrap(), vals);
    }

    /// Views that would reach past their base are refused, never created.
    #[test]
    fn out_of_bounds_views_are_refused(dims in any_dims(), extra in 1usize..64, off in 0usize..512) {
        let t = Tensor::new(DType::F32, &dims).unwrap();
        let n = t.nelements();
        let r = ops::view_1d(&t, n + extra, 0);
        prop_assert!(r.is_err());
        let r = ops::view_1d(&t, n, off);
        prop_assert_eq!(r.is_ok(), off + 4 * n <= t.nbytes());
    }
}

#[test]
fn in_place_ops_write_over_their_strided_source() {
    // a transposed (strided) view, scaled in place: the base changes
    let base = Tensor::new(DType::F32, &[3, 2]).unwrap().with_name("base");
    let tv = ops::transpose(&base).unwrap();
    let r = ops::make_inplace(
        strata::ops::Op::Scale {
            scale: 2.0,
            bias: 1.0,
        },
        vec![Some(tv.clone())],
    )
    .unwrap();
    assert_eq!(r.nb(), tv.nb());
    assert!(r.view_of().unwrap().src == base);
    let g = strata::Graph::build(&[r.clone()]);
    let _b = strata::cpu::alloc_graph_host(&g).unwrap();
    base.write_f32(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    strata::cpu::compute(&g, 2).unwrap();
    assert_eq!(
        base.to_f32_vec().unwrap(),
        vec![3.0, 5.0, 7.0, 9.0, 11.0, 13.0]
    );
    assert_eq!(
        r.to_f32_vec().unwrap(),
        vec![3.0, 9.0, 5.0, 11.0, 7.0, 13.0]
    );
    // ops that cannot run in place, or change the shape, are refused
    assert!(ops::make_inplace(
        strata::ops::Op::MulMat,
        vec![Some(tv.clone()), Some(tv.clone())]
    )
    .is_err());
    assert!(ops::make_inplace(strata::ops::Op::Sum, vec![Some(tv)]).is_err());
}

/// The binary ops on flat f32 rows run straight from the sources into dst
/// (no scratch copies) when dst is a source's own row or disjoint from
/// both: in place over `a`, over both operands (`x op x`), with `b` a
/// broadcast row, and out of place must give the same bits as the plain
/// f32 operation, for 1–3 threads.
#[test]
fn binary_ops_in_place_and_direct_give_the_f32_bits() {
    use strata::ops::Op;
    let mut rng = common::Rng::new(21);
    let (n0, n1, n2) = (37usize, 5usize, 3usize);
    let av = rng.vec(n0 * n1 * n2, -4.0, 4.0);
    let full = rng.vec(n0 * n1 * n2, 0.5, 3.0);
    let row = rng.vec(n0, 0.5, 3.0);
    let f = |op: &Op, x: f32, y: f32| match op {
        Op::Add => x + y,
        Op::Sub => x - y,
        Op::Mul => x * y,
        _ => x / y,
    };
    for op in [Op::Add, Op::Sub, Op::Mul, Op::Div] {
        for broadcast in [false, true] {
            let bv = if broadcast { &row } else { &full };
            let want: Vec<f32> = (0..av.len())
                .map(|i| f(&op, av[i], bv[if broadcast { i % n0 } else { i }]))
                .collect();
            let same: Vec<f32> = av.iter().map(|&x| f(&op, x, x)).collect();
            for nth in 1..=3 {
                let a = Tensor::new(DType::F32, &[n0, n1, n2]).unwrap();
                let b = Tensor::new(
                    DType::F32,
                    &[
                        n0,
                        if broadcast { 1 } else { n1 },
                        if broadcast { 1 } else { n2 },
                    ],
                )
                .unwrap();
                let out =
                    ops::make(op.clone(), vec![Some(a.clone()), Some(b.clone())], None).unwrap();
                let over_a =
                    ops::make_inplace(op.clone(), vec![Some(a.clone()), Some(b.clone())]).unwrap();
                let g = strata::Graph::build(&[out.clone()]);
                let _m = strata::cpu::alloc_graph_host(&g).unwrap();
                a.write_f32(&av).unwrap();
                b.write_f32(bv).unwrap();
                strata::cpu::compute(&g, nth).unwrap();
                let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
                let want_bits = bits(want.clone());
                assert_eq!(
                    bits(out.to_f32_vec().unwrap()),
                    want_bits,
                    "{} out of place, {nth} threads",
                    op.name()
                );
                let g = strata::Graph::build(&[over_a.clone()]);
                let _m = strata::cpu::alloc_graph_host(&g).unwrap();
                a.write_f32(&av).unwrap();
                b.write_f32(bv).unwrap();
                strata::cpu::compute(&g, nth).unwrap();
                assert_eq!(
                    bits(a.to_f32_vec().unwrap()),
                    want_bits,
                    "{} in place, {nth} threads",
                    op.name()
                );
                // x op x, in place: dst is both sources' row
                let x = Tensor::new(DType::F32, &[n0, n1, n2]).unwrap();
                let xx =
                    ops::make_inplace(op.clone(), vec![Some(x.clone()), Some(x.clone())]).unwrap();
                let g = strata::Graph::build(&[xx]);
                let _m = strata::cpu::alloc_graph_host(&g).unwrap();
                x.write_f32(&av).unwrap();
                strata::cpu::compute(&g, nth).unwrap();
                assert_eq!(
                    bits(x.to_f32_vec().unwrap()),
                    bits(same.clone()),
                    "{} x op x, {nth} threads",
                    op.name()
                );
            }
        }
    }
}

/// The CPU backend reuses a graph's resolved memory between computes; moving
/// tensors to other buffers in between must be seen, and data-dependent checks
/// must still run on every compute.
#[test]
fn cpu_backend_recomputes_after_tensors_move_and_rechecks_indices() {
    use strata::backend::Backend;
    use strata::cpu::CpuBackend;
    use strata::Graph;

    let table = Tensor::new(DType::F32, &[2, 3]).unwrap().with_name("table");
    let idx = Tensor::new(DType::I32, &[2]).unwrap().with_name("idx");
    let rows = ops::get_rows(&table, &idx).unwrap();
    let out = ops::scale(&rows, 2.0).unwrap();
    let g = Graph::build(&[out.clone()]);
    let mut cpu = CpuBackend::new(2);

    let _b1 = alloc(&[&table, &idx, &rows, &out]);
    table.write_f32(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    idx.write_i32(&[2, 0]).unwrap();
    cpu.graph_compute(&g).unwrap();
    assert_eq!(out.to_f32_vec().unwrap(), vec![10.0, 12.0, 2.0, 4.0]);

    // same graph, new data: computed again from the cached plan
    idx.write_i32(&[1, 1]).unwrap();
    cpu.graph_compute(&g).unwrap();
    assert_eq!(out.to_f32_vec().unwrap(), vec![6.0, 8.0, 6.0, 8.0]);

    // another thread count re-sizes the cached plans' work memory
    cpu.set_n_threads(3);
    cpu.graph_compute(&g).unwrap();
    assert_eq!(out.to_f32_vec().unwrap(), vec![6.0, 8.0, 6.0, 8.0]);

    // an index out of range is refused although the plan is cached
    idx.write_i32(&[3, 0]).unwrap();
    assert!(cpu.graph_compute(&g).is_err());

    // every tensor moved to fresh buffers: the old ones are dropped, the
    // results must land in (and be read from) the new ones
    for t in [&table, &idx, &rows, &out] {
        t.clear_storage();
    }
    drop(_b1);
    let _b2 = alloc(&[&table, &idx, &rows, &out]);
    table
        .write_f32(&[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0])
        .unwrap();
    idx.write_i32(&[0, 2]).unwrap();
    cpu.graph_compute(&g).unwrap();
    assert_eq!(out.to_f32_vec().unwrap(), vec![-2.0, -4.0, -10.0, -12.0]);
}

/// Issue 15 item 4: the buffers `alloc_tensors` made are one handle, and
/// `set_usage` on it marks every one (ggml's multi-buffer).
#[test]
fn one_handle_marks_every_buffer_of_a_multi_buffer_allocation() {
    let buft = HostBufferType::with_max_size(256);
    let ts: Vec<Tensor> = (0..6)
        .map(|_| Tensor::new(DType::F32, &[32]).unwrap())
        .collect();
    let bufs = alloc_tensors(&ts, &buft).unwrap();
    assert!(bufs.len() >= 2, "{bufs:?}");
    assert_eq!(bufs.usage(), Some(BufferUsage::Any));
    bufs.set_usage(BufferUsage::Weights);
    assert!(bufs.iter().all(|b| b.usage() == BufferUsage::Weights));
    assert_eq!(bufs.usage(), Some(BufferUsage::Weights));
    bufs[0].set_usage(BufferUsage::Any);
    assert_eq!(bufs.usage(), None, "mixed usages");
    assert_eq!(bufs.size(), bufs.iter().map(|b| b.size()).sum::<usize>());
    assert_eq!(MultiBuffer::default().usage(), None);
}

/// Issue 15 item 5: devices by type and `NAME:PARAMS` init strings
/// (ggml_backend_dev_by_type, ggml_backend_init_by_name with params).
#[test]
fn devices_by_type_and_init_strings() {
    use strata::backend::{split_spec, DeviceType};
    let reg = Registry::with_defaults();
    assert_eq!(reg.device_by_type(DeviceType::Cpu).unwrap().name(), "CPU");
    let e = reg
        .device_by_type(DeviceType::Gpu)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("Gpu") && e.contains("CPU"), "{e}");
    assert_eq!(split_spec("CPU"), ("CPU", ""));
    assert_eq!(split_spec("CPU:threads=2"), ("CPU", "threads=2"));
    assert_eq!(
        split_spec("RPC[127.0.0.1:50052]"),
        ("RPC[127.0.0.1:50052]", "")
    );
    assert_eq!(split_spec("RPC[h:1]:x=y"), ("RPC[h:1]", "x=y"));
    let be = reg.backend_from_spec("CPU:threads=2, isa=scalar").unwrap();
    assert_eq!(be.name(), "CPU");
    let cpu = strata::cpu::CpuBackend::from_params("threads=3, isa=scalar").unwrap();
    assert_eq!((cpu.n_threads(), cpu.isa()), (3, strata::isa::Isa::Scalar));
    assert!(reg.backend_by_type(DeviceType::Cpu, "").is_ok());
    for bad in [
        "CPU:threads=0",
        "CPU:threads=x",
        "CPU:isa=mmx",
        "CPU:color=red",
        "NPU:x",
    ] {
        let Err(e) = reg.backend_from_spec(bad) else {
            panic!("{bad} was accepted")
        };
        let e = e.to_string();
        assert!(e.contains("CPU") || e.contains("NPU"), "{bad}: {e}");
    }
}
