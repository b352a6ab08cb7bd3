//! The wire layer's own error: a body, or a field of it, that does not have the shape its API takes. It says what
//! was wrong in the API's words and names the field (`param`); `error::ApiError` turns it into a 400.

/// A body or field of the wrong shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeError {
    pub message: String,
    /// The field at fault, in the API's own spelling (`temperature`, `messages[0].role`); None: the body as a whole.
    pub param: Option<String>,
    /// A machine-readable reason (`invalid_value`, `invalid_json`), when there is one.
    pub code: Option<&'static str>,
}

impl ShapeError {
    /// The body as a whole is wrong (no field to name, no code).
    pub fn body(message: impl Into<String>) -> Self {
        Self { message: message.into(), param: None, code: None }
    }

    /// Field `name` has a value it cannot take (`invalid_value`).
    pub fn field(name: &str, message: impl Into<String>) -> Self {
        Self { message: message.into(), param: Some(name.to_string()), code: Some("invalid_value") }
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }
}

impl std::fmt::Display for ShapeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ShapeError {}
