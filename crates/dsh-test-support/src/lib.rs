//! dsh-test-support
