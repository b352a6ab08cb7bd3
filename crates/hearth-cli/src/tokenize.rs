//! `hearth tokenize`: token ids of a text.

use crate::ModelArgs;
use clap::Args;
use hearth_engine::tokenizer::chat_template::RenderOptions;

#[derive(Args)]
pub struct TokenizeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    pub text: String,
    /// Render the text as one user message through the chat template first (with the generation prompt).
    #[arg(long)]
    pub chat: bool,
    /// Do not add BOS even when the model wants it (raw mode only).
    #[arg(long, conflicts_with = "chat")]
    pub no_special: bool,
}

pub fn run(a: TokenizeArgs) -> anyhow::Result<()> {
    // Only the tokenizer is needed, but loading resolves and validates the model the same way as generate.
    let m = a.model.load()?;
    let tok = &m.tokenizer;
    let ids = if a.chat {
        let tmpl = tok.chat_template.as_ref().ok_or_else(|| {
            anyhow::anyhow!("this model has no chat template; drop --chat, or pass --chat-template FILE")
        })?;
        let msgs = serde_json::json!([{"role": "user", "content": a.text}]);
        tok.encode_chat(&tmpl.render(&msgs, &RenderOptions { add_generation_prompt: true, ..Default::default() })?)?
    } else {
        tok.encode(&a.text, !a.no_special)?
    };
    println!("{}", serde_json::to_string(&ids)?);
    Ok(())
}
