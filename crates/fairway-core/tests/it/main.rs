mod dsl;
mod oracle;
mod props;
mod scenarios;
mod search;
mod smoke;
