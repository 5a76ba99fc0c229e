//! Tensors: element types, shapes and strides, views and storage.

mod dtype;

pub use dtype::DType;
