pub mod apiserver;
pub mod session;
