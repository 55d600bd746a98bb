//! residency-formats: the files of the engines we read and write. Heat in
//! every format engines and data sets record it (`heat`: detection, one
//! reader/writer module per format family, traces), engine settings for a
//! plan (`export`: one module per engine), llama.cpp's model files
//! (`gguf`: the header and the model description it implies), PyTorch's
//! `.pt` files of count tensors (`torch`), and the planner's inputs
//! assembled from paths or the embedded defaults (`inputs`).

pub mod export;
pub mod gguf;
pub mod heat;
pub mod inputs;
pub mod llama_bench;
pub mod torch;
