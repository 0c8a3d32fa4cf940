//! `tsdb fsck --index`.
