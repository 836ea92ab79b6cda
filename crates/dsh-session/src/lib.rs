//! dsh-session
