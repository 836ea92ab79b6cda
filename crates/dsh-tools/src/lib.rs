//! dsh-tools
