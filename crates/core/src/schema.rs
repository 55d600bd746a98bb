//! JSON Schemas of the input and output files, generated from the Rust types
//! (design §2: `schemas/`, with a test that fails when the committed files
//! drift from the types). `residency schema` writes them.

use crate::constraints::ConstraintsFile;
use crate::kv::KvGroupsFile;
use crate::model::ModelDescription;
use crate::plan::Plan;
use crate::profile::HardwareProfile;

/// File name and content (pretty JSON and a trailing newline) of each schema:
/// the hardware profile (design §3.1), the model description (3.2), the KV
/// groups file (4.6), the plan file (5) and the constraints file.
pub fn schemas() -> Vec<(&'static str, String)> {
    vec![
        (
            "hardware-profile.schema.json",
            render(schemars::schema_for!(HardwareProfile)),
        ),
        (
            "model-description.schema.json",
            render(schemars::schema_for!(ModelDescription)),
        ),
        (
            "kv-groups.schema.json",
            render(schemars::schema_for!(KvGroupsFile)),
        ),
        ("plan.schema.json", render(schemars::schema_for!(Plan))),
        (
            "constraints.schema.json",
            render(schemars::schema_for!(ConstraintsFile)),
        ),
    ]
}

/// Pretty JSON and a trailing newline, as every committed schema is.
pub fn render(schema: schemars::Schema) -> String {
    let mut text = serde_json::to_string_pretty(&schema).expect("a schema is plain JSON");
    text.push('\n');
    text
}
