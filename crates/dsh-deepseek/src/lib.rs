//! dsh-deepseek
