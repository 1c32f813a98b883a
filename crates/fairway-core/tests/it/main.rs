mod dsl;
mod oracle;
mod props;
mod reservations;
mod scenarios;
mod search;
mod smoke;
