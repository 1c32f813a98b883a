//! Wire formats (placeholder until the spec crate lands).
