//! Bad input on a GPU (issue #14's last bar): a buffer larger than the device
//! allows, a tensor that does not fit, a tensor in another device's memory,
//! an op the device does not run, a lost device — typed errors naming the
//! device and the tensor, never a panic.

use std::sync::Arc;

use strata::backend::{alloc_tensors, Backend, Device};
use strata::cpu::cpu_buffer_type;
use strata::{ops, DType, Error, Graph, Tensor};

mod support;

/// Asserts that error `e` matches `pat` and its message names `name`.
macro_rules! assert_error_names {
    ($e:expr, $pat:pat, $name:expr) => {{
        let e = &$e;
        assert!(matches!(e, $pat) && e.to_string().contains($name), "{e}");
    }};
}

#[test]
fn a_buffer_beyond_the_device_limit_is_a_typed_error() {
    let Some(dev) = support::gpu() else { return };
    let buft = dev.default_buffer_type();
    let max = buft.max_size();
    let e = buft.clone().alloc_buffer(max + 1).err().expect("refused");
    assert!(
        matches!(&e, Error::OutOfMemory { buffer_type, requested, .. }
            if *buffer_type == dev.name() && *requested == max + 1),
        "{e}"
    );
    assert!(e.to_string().contains("largest buffer"), "{e}");
}

#[test]
fn a_tensor_larger_than_a_buffer_is_named() {
    let Some(dev) = support::gpu() else { return };
    let buft = dev.default_buffer_type();
    let n = buft.max_size() / 4 + 1;
    let t = Tensor::new(DType::F32, &[n]).unwrap().with_name("huge");
    let e = alloc_tensors(&[t], &buft).expect_err("refused");
    assert_error_names!(e, Error::OutOfMemory { .. }, "'huge'");
}

#[test]
fn reads_and_writes_of_any_alignment_round_trip() {
    let Some(dev) = support::gpu() else { return };
    let t = Tensor::new(DType::I8, &[37]).unwrap().with_name("bytes");
    let _buf = alloc_tensors(&[t.clone()], &dev.default_buffer_type()).unwrap();
    let data: Vec<u8> = (0..37u8).map(|i| i.wrapping_mul(7)).collect();
    strata::backend::tensor_set(&t, 0, &data).unwrap();
    // an unaligned patch in the middle keeps its neighbours
    strata::backend::tensor_set(&t, 5, &[200, 201, 202]).unwrap();
    strata::backend::tensor_memset(&t, 30, 3, 9).unwrap();
    let mut want = data.clone();
    want[5..8].copy_from_slice(&[200, 201, 202]);
    want[30..33].fill(9);
    let mut got = vec![0u8; 37];
    strata::backend::tensor_get(&t, 0, &mut got).unwrap();
    assert_eq!(got, want);
    let mut mid = [0u8; 6];
    strata::backend::tensor_get(&t, 3, &mut mid).unwrap();
    assert_eq!(mid, want[3..9]);
    // out of the tensor: a typed error naming it
    let e = strata::backend::tensor_set(&t, 36, &[1, 2]).unwrap_err();
    assert_error_names!(e, Error::OutOfBounds { .. }, "bytes");
}

#[test]
fn a_source_in_host_memory_is_refused_by_name() {
    let Some(dev) = support::gpu() else { return };
    let a = Tensor::new(DType::F32, &[8]).unwrap().with_name("on_gpu");
    let b = Tensor::new(DType::F32, &[8]).unwrap().with_name("on_cpu");
    let _g = alloc_tensors(&[a.clone()], &dev.default_buffer_type()).unwrap();
    let _c = alloc_tensors(&[b.clone()], &cpu_buffer_type()).unwrap();
    let sum = ops::add(&a, &b).unwrap().with_name("sum");
    let graph = Graph::build(&[sum.clone()]);
    let _n = alloc_tensors(graph.nodes(), &dev.default_buffer_type()).unwrap();
    let mut backend = dev.backend();
    let e = backend.graph_compute(&graph).unwrap_err();
    assert!(
        matches!(&e, Error::BadTensor { tensor, .. } if tensor == "on_cpu"),
        "{e}"
    );
    assert!(e.to_string().contains(&dev.name()), "{e}");
}

#[test]
fn an_op_the_device_does_not_run_is_a_typed_error() {
    let Some(dev) = support::gpu() else { return };
    // f32 elements at an odd byte offset: word loads cannot read them, so
    // the kernels refuse the view (the scheduler would run it on the CPU)
    let base = Tensor::new(DType::F32, &[9]).unwrap().with_name("base");
    let a = ops::view_1d(&base, 4, 2).unwrap().with_name("odd_view");
    let s = ops::add(&a, &a).unwrap().with_name("odd_sum");
    assert!(!dev.supports_op(&s));
    let graph = Graph::build(&[s.clone()]);
    let _b = alloc_tensors(&[base], &dev.default_buffer_type()).unwrap();
    let _n = alloc_tensors(graph.nodes(), &dev.default_buffer_type()).unwrap();
    let e = dev.backend().graph_compute(&graph).unwrap_err();
    assert!(
        matches!(&e, Error::Unsupported { backend, what } if *backend == dev.name()
            && what.contains("odd_sum")),
        "{e}"
    );
}

#[test]
fn a_lost_device_is_a_typed_error_everywhere() {
    let Some(shared) = support::gpu() else { return };
    let dev = strata_gpu::open_private(&shared.name()).unwrap();
    let t = Tensor::new(DType::F32, &[16]).unwrap().with_name("t");
    let _b = alloc_tensors(&[t.clone()], &dev.default_buffer_type()).unwrap();
    t.write_f32(&[1.0; 16]).unwrap();
    let sq = ops::sqr(&t).unwrap().with_name("sq");
    let graph = Graph::build(&[sq.clone()]);
    let _n = alloc_tensors(graph.nodes(), &dev.default_buffer_type()).unwrap();
    let mut backend = dev.backend();
    backend.graph_compute(&graph).unwrap();
    assert_eq!(sq.to_f32_vec().unwrap(), vec![1.0; 16]);
    dev.destroy();
    let lost = |e: &Error| matches!(e, Error::Backend { msg, .. } if msg.contains("lost"));
    let e = backend.graph_compute(&graph).unwrap_err();
    assert!(lost(&e), "{e}");
    let e = t.to_f32_vec().unwrap_err();
    assert!(lost(&e), "{e}");
    let e = alloc_tensors(
        &[Tensor::new(DType::F32, &[4]).unwrap()],
        &dev.default_buffer_type(),
    )
    .unwrap_err();
    assert!(lost(&e), "{e}");
    assert!(dev.init_backend().is_err());
    // the shared device is untouched
    let u = Tensor::new(DType::F32, &[4]).unwrap();
    let _c = alloc_tensors(&[u.clone()], &shared.default_buffer_type()).unwrap();
    u.write_f32(&[2.0; 4]).unwrap();
    assert_eq!(u.to_f32_vec().unwrap(), vec![2.0; 4]);
}

#[test]
fn events_order_work_between_backends() {
    let Some(dev) = support::gpu() else { return };
    let ev: Arc<dyn strata::backend::Event> = dev.event_new().expect("GPUs have events");
    let mut backend = dev.backend();
    // before any record: nothing to wait for
    ev.synchronize().unwrap();
    backend.event_record(&ev).unwrap();
    ev.synchronize().unwrap();
    // an event of another kind is refused by name
    struct Foreign;
    impl strata::backend::Event for Foreign {
        fn synchronize(&self) -> strata::Result<()> {
            Ok(())
        }
    }
    let other: Arc<dyn strata::backend::Event> = Arc::new(Foreign);
    assert!(matches!(
        backend.event_record(&other),
        Err(Error::Unsupported { .. })
    ));
}
