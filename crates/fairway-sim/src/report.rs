//! Terminal table, markdown and SVG report (in progress).
