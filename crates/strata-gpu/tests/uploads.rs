//! Tensor writes go through the persistent upload buffer (`upload.rs`) when
//! they are small and it is mapped, else through `Queue::write_buffer`:
//! either way they land in the order they were made, and a graph reads them.

use strata::backend::{alloc_tensors, tensor_get, tensor_set, Backend, Device};
use strata::{ops, DType, Graph, Tensor};

mod support;

fn bytes(t: &Tensor) -> Vec<u8> {
    let mut out = vec![0u8; t.nbytes()];
    tensor_get(t, 0, &mut out).unwrap();
    out
}

fn words(v: i32, n: usize) -> Vec<u8> {
    (0..n).flat_map(|_| v.to_le_bytes()).collect()
}

#[test]
fn writes_land_in_the_order_they_were_made_whichever_path_they_take() {
    let Some(dev) = support::gpu() else { return };
    let c = dev.context();
    // 32 KiB: more than one staged write may take
    let n = 8192;
    let t = Tensor::new(DType::I32, &[n]).unwrap();
    let _buf = alloc_tensors(&[t.clone()], &dev.default_buffer_type()).unwrap();
    tensor_set(&t, 0, &words(1, n)).unwrap();
    // a read submits and waits: the upload buffer is mapped after it
    assert_eq!(bytes(&t), words(1, n));

    let before = c.counters();
    tensor_set(&t, 0, &words(2, 4)).unwrap();
    // too large to stage: the staged write before it is submitted first
    tensor_set(&t, 0, &words(3, n)).unwrap();
    let spent = c.counters() - before;
    assert_eq!(
        (spent.writes_staged, spent.writes_direct),
        (1, 1),
        "{spent:?}"
    );
    assert_eq!(bytes(&t), words(3, n), "the later write wins");

    // staged writes over one another, then an unaligned one (its edge words
    // read back, merged and written whole)
    let before = c.counters();
    tensor_set(&t, 16, &words(4, 4)).unwrap();
    tensor_set(&t, 16, &words(5, 2)).unwrap();
    tensor_set(&t, 30, &[9, 9, 9]).unwrap();
    let spent = c.counters() - before;
    assert_eq!(
        (spent.writes_staged, spent.writes_direct),
        (3, 0),
        "{spent:?}"
    );
    let mut want = words(3, n);
    want[16..32].copy_from_slice(&[words(5, 2), words(4, 2)].concat());
    want[30..33].fill(9);
    assert_eq!(bytes(&t), want);

    // a graph reads what was staged before it (its submission copies first)
    let x = Tensor::new(DType::F32, &[4]).unwrap();
    let y = ops::scale(&x, 2.0).unwrap();
    let g = Graph::build(&[y.clone()]);
    let _bufs = alloc_tensors(&[x.clone(), y.clone()], &dev.default_buffer_type()).unwrap();
    let mut be = dev.backend();
    for k in 0..3 {
        let v: Vec<f32> = (0..4).map(|i| (i + k) as f32).collect();
        let before = c.counters();
        x.write_f32(&v).unwrap();
        be.graph_compute(&g).unwrap();
        let got = y.to_f32_vec().unwrap();
        let spent = c.counters() - before;
        assert_eq!(spent.writes_staged, 1, "step {k}: {spent:?}");
        let want: Vec<f32> = v.iter().map(|a| a * 2.0).collect();
        assert_eq!(got, want, "step {k}");
    }
}
