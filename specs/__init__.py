"""The operator library: .kspec files shipped as package data."""
