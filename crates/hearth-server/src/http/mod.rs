//! The HTTP side that is no API's: the connection layer ([`conns`]), the layers every route shares
//! ([`middleware`], the browser guard [`guard`], gzip [`compress`]), the one request-body extractor ([`body`]), and
//! the web chat ([`ui`]).

pub mod body;
pub mod compress;
pub mod conns;
pub mod guard;
pub mod middleware;
pub mod ui;
