//! An importance matrix written by llama.cpp's `gguf` Python package
//! (`tests/data/imatrix/make.py`), read as heat. The expected counts and
//! tokens are the ones `make.py` wrote, by hand.

use residency_formats::heat::{read_heat, HeatContext, HeatFormat};
use std::path::PathBuf;

#[test]
fn a_matrix_gguf_py_wrote_is_heat_per_layer_and_expert() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/imatrix/tiny.imatrix.gguf");
    let mut notes = Vec::new();
    let heat = read_heat(&path, None, &HeatContext::default(), &mut notes).unwrap();
    assert_eq!(heat.format, HeatFormat::Imatrix);
    assert_eq!(
        heat.total.counts,
        vec![vec![8.0, 4.0, 4.0, 0.0], vec![2.0, 6.0, 7.0, 1.0]]
    );
    // One chunk of 8 tokens, in each layer.
    assert_eq!(heat.total.tokens, Some(vec![8, 8]));
}
