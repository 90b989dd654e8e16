//! Model provisioning (filled by the provisioning work).
