//! The provider-neutral model-call vocabulary of dsh (docs/model-calls.md).
//!
//! A model call is four parts: the system prompt, the message history, the tool schemas and the
//! call config (sampling and routing). Its reply is a stream of [`Chunk`]s that ends with exactly
//! one [`Chunk::Finish`]. Adapters (one per wire format) translate between this vocabulary and a
//! provider; everything above them (the loop, the session log, the front ends) speaks only this.
//!
//! Serde names follow the original dsh so that session logs interoperate.
#![warn(missing_docs, unreachable_pub)]
#![warn(clippy::too_many_lines)]

mod adapter;
mod assembler;
mod block;
pub mod calendar;
mod chunk;
mod config;
mod effort;
mod failure;
mod image;
mod message;
mod model_table;
mod price;
pub mod providers;
mod retry;
mod session_cache;
mod sync;
mod usage;

pub use adapter::{
    Adapter, AdapterRegistry, ChunkStream, GenerateRequest, HistoryLineage, ModelInfo, Purpose,
    RegistryError, ToolSchema,
};
pub use assembler::{AssembledReply, AssemblerError, BlockAssembler};
pub use block::{BlockType, ContentBlock};
pub use chunk::{Chunk, FinishReason};
pub use config::{CallConfig, ConfigField, PreparedCallConfig, ReasoningEffort};
pub use effort::{effort_names, CarriedEffort};
pub use failure::{Failure, FailureCode};
pub use image::{
    attachment_id, check_image_input, check_images_loaded, content_has_image, extension_media_type,
    images_to_placeholders, media_type_extension, messages_have_images, replace_images,
    takes_images, ImageAttachment, ImageError, IMAGE_INPUT, MAX_IMAGE_BYTES, UNSUPPORTED_CONTENT,
};
pub use message::{Message, MessageSource, Role};
pub use model_table::{ModelRow, ModelTable};
pub use price::{ModelPrice, PriceTable};
pub use retry::{RetryDecision, RetryPolicy};
pub use session_cache::{KeptTools, PerSession, SharedBytes, WrittenHistory};
pub use sync::{LockExt, RwLockExt};
pub use usage::{Usage, UsageTotals};
